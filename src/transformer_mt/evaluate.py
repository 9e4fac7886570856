"""``evaluate(cfg)``: decode a split of a trained run and score it as the paper does, and with SacreBLEU."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from transformer_mt.checkpoint import load_model, run_data_config
from transformer_mt.config import DecodeConfig, check_keys
from transformer_mt.data.sources import load_corpus
from transformer_mt.decoding import quantize_for_decoding, translate
from transformer_mt.deploy.ct2 import CT2Translator
from transformer_mt.metrics import compound_split_bleu, corpus_bleu, corpus_chrf

log = logging.getLogger(__name__)


def evaluate(cfg: DictConfig) -> dict:
    """Translate ``cfg.split`` of the run's data with ``cfg.decode`` and write hypotheses and scores.

    Returns:
        The scores also written to ``scores.json`` in ``cfg.output_dir``.
    """
    check_keys(cfg)
    run_dir, out = Path(cfg.run_dir), Path(cfg.output_dir)
    data_cfg = run_data_config(run_dir)
    decode: DecodeConfig = OmegaConf.to_object(cfg.decode)
    if decode.engine == "ct2":
        engine = CT2Translator(decode.ct2_dir or run_dir / "ct2")
        sources = [Path(p) for p in engine.info["checkpoints"]]
        if len(sources) != cfg.ckpt.average_last:
            log.warning(
                "decode.engine=ct2 uses the export's %d checkpoint(s), not ckpt.average_last=%d: "
                "export again with scripts/export_ct2.py --average-last %d",
                len(sources),
                cfg.ckpt.average_last,
                cfg.ckpt.average_last,
            )
    else:
        model, tokenizer, sources = load_model(
            cfg.ckpt.path or run_dir, average_last=cfg.ckpt.average_last
        )
        model = quantize_for_decoding(model, decode.quantize)

    split = load_corpus(data_cfg)[cfg.split]
    if cfg.limit is not None:
        split = split.select(range(min(cfg.limit, len(split))))
    started = time.perf_counter()
    if decode.engine == "ct2":
        results = engine.translate(list(split["src"]), decode, long_inputs=cfg.long_inputs)
    else:
        results = translate(
            model, tokenizer, list(split["src"]), decode, long_inputs=cfg.long_inputs, progress=True
        )
    seconds = time.perf_counter() - started
    hyps, refs = [r[0].text for r in results], list(split["tgt"])

    bleu, chrf = corpus_bleu(hyps, refs), corpus_chrf(hyps, refs)
    scores = {
        "bleu": round(bleu.score, 2),
        "bleu_signature": bleu.signature,
        "chrf": round(chrf.score, 2),
        "chrf_signature": chrf.signature,
        "sentences": len(hyps),
        "seconds": round(seconds, 1),
        "sentences_per_second": round(len(hyps) / seconds, 1),
        "checkpoints": [str(p) for p in sources],
        "decode": asdict(decode),
        "data": data_cfg.name,
        "split": cfg.split,
    }
    lines = [
        f"{cfg.split} of {data_cfg.name}, {len(hyps)} sentences, beam {decode.beam_size}, "
        f"α {decode.length_penalty}, {len(sources)} checkpoint(s), engine {decode.engine}"
        + (" (compiled)" if decode.compile else "")
        + ":",
        f"  SacreBLEU: {bleu.text}",
        f"  signature: {bleu.signature}",
        f"  {chrf.text}",
    ]
    if (
        data_cfg.tgt_lang == "de"
    ):  # the paper's EN-DE figure, comparable with its Table 2, not with SacreBLEU
        paper = compound_split_bleu(hyps, refs, lang="de")
        scores["bleu_tokenized_compound_split"] = round(paper.score, 2)
        lines.append(
            f"  paper-comparable (Moses-tokenized, compound-split) BLEU: {paper.score:.2f}"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "hyp.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    # the references line by line beside the hypotheses: two runs' hyp.txt compare with
    # sacrebleu's paired bootstrap (``sacrebleu ref.txt -i A/hyp.txt B/hyp.txt --paired-bs``)
    (out / "ref.txt").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    (out / "scores.json").write_text(json.dumps(scores, indent=2) + "\n")
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    print("\n".join(lines))
    return scores
