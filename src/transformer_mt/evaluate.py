"""``evaluate(cfg)``: decode a split of a trained run and score it as the paper does, and with SacreBLEU."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from transformer_mt.checkpoint import load_model, run_data_config
from transformer_mt.config import DecodeConfig, check_keys
from transformer_mt.data.sources import load_corpus
from transformer_mt.decoding import quantize_for_decoding, translate
from transformer_mt.deploy.ct2 import CT2Translator
from transformer_mt.distributed import refuse_several_processes
from transformer_mt.errors import UserError
from transformer_mt.scoring import (
    alpha_lines,
    corpus_split,
    length_penalty_rows,
    score_translations,
)

log = logging.getLogger(__name__)


def evaluate(cfg: DictConfig) -> dict:
    """Translate ``cfg.split`` of the run's data with ``cfg.decode`` and write hypotheses and scores.

    Returns:
        The scores also written to ``scores.json`` in ``cfg.output_dir``.
    """
    check_keys(cfg)
    refuse_several_processes("scripts/evaluate.py")
    decode: DecodeConfig = OmegaConf.to_object(cfg.decode)
    if cfg.length_penalties is not None:
        _check_length_penalties(cfg.length_penalties, decode)
    run_dir, out = Path(cfg.run_dir), Path(cfg.output_dir)
    data_cfg = run_data_config(run_dir)
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

    split = corpus_split(load_corpus(data_cfg), cfg.split, data_cfg)
    if cfg.limit is not None:
        split = split.select(range(min(cfg.limit, len(split))))
    srcs, refs = list(split["src"]), list(split["tgt"])

    def decode_split(settings: DecodeConfig) -> list[str]:
        if settings.engine == "ct2":
            results = engine.translate(srcs, settings, long_inputs=cfg.long_inputs)
        else:
            results = translate(
                model, tokenizer, srcs, settings, long_inputs=cfg.long_inputs, progress=True
            )
        return [r[0].text for r in results]

    if cfg.length_penalties is not None:
        return choose_length_penalty(decode_split, decode, refs, cfg.length_penalties, out, cfg)
    started = time.perf_counter()
    hyps = decode_split(decode)
    seconds = time.perf_counter() - started

    scores, score_lines = score_translations(hyps, refs, data_cfg)
    scores.update(
        {
            "sentences": len(hyps),
            "seconds": round(seconds, 1),
            "sentences_per_second": round(len(hyps) / seconds, 1),
            "checkpoints": [str(p) for p in sources],
            "decode": asdict(decode),
            "data": data_cfg.name,
            "direction": f"{data_cfg.src_lang}-{data_cfg.tgt_lang}",
            "split": cfg.split,
        }
    )
    lines = [
        f"{cfg.split} of {data_cfg.name} ({data_cfg.src_lang}->{data_cfg.tgt_lang}), "
        f"{len(hyps)} sentences, beam {decode.beam_size}, "
        f"α {decode.length_penalty}, {len(sources)} checkpoint(s), engine {decode.engine}"
        + (" (compiled)" if decode.compile else "")
        + ":",
        *score_lines,
    ]
    out.mkdir(parents=True, exist_ok=True)
    (out / "hyp.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    # the references line by line beside the hypotheses: two runs' hyp.txt compare with
    # sacrebleu's paired bootstrap (``sacrebleu ref.txt -i A/hyp.txt B/hyp.txt --paired-bs``)
    (out / "ref.txt").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    (out / "scores.json").write_text(json.dumps(scores, indent=2) + "\n")
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    print("\n".join(lines))
    return scores


def choose_length_penalty(
    decode_split: Callable[[DecodeConfig], list[str]],
    decode: DecodeConfig,
    refs: Sequence[str],
    alphas: Sequence[float],
    out: Path,
    cfg: DictConfig,
) -> dict:
    """Decode the split once per length penalty α and keep the one of highest BLEU.

    The paper set beam size and α "after experimentation on the development set" (§6.1); its
    α 0.6 suits its models and data, not necessarily a small model trained for minutes, whose
    beam outputs can run short of the references. Run it on ``split=valid`` and score the test
    set with the α it names. Ties go to the α nearest ``decode.length_penalty``. ``alphas``
    and ``decode`` are checked by ``evaluate`` (``_check_length_penalties``) before any loading.

    Returns:
        the per-α scores and the choice, also written to ``length_penalty.json`` in ``out``.
    """
    if cfg.split == "test":
        log.warning(
            "length_penalties on split=test: α chosen on the test set overstates its score; "
            "choose it on split=valid and score the test set with that α"
        )
    rows, best, signature = length_penalty_rows(decode_split, decode, refs, alphas)
    result = {
        "split": cfg.split,
        "sentences": len(refs),
        "beam_size": decode.beam_size,
        "length_norm": decode.length_norm,
        "bleu_signature": signature,
        "scores": rows,
        "best_length_penalty": best["length_penalty"],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "length_penalty.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"{cfg.split}, {len(refs)} sentences, beam {decode.beam_size}, per length penalty α:"]
    lines += alpha_lines(rows, best)
    # the settings that change the output and differ from the defaults, so that the command
    # scores the test set with the search the sweep ran (batch size changes nothing)
    default = DecodeConfig()
    kept = [
        f"decode.{k}={v}"
        for k, v in asdict(decode).items()
        if k not in ("length_penalty", "batch_size") and v != getattr(default, k)
    ]
    lines.append(
        "score the test set with it: python scripts/evaluate.py "
        f"run_dir={cfg.run_dir} ckpt.average_last={cfg.ckpt.average_last} "
        + " ".join(kept + [f"decode.length_penalty={best['length_penalty']:g}"])
    )
    print("\n".join(lines))
    return result


def _check_length_penalties(alphas: Sequence[float], decode: DecodeConfig) -> None:
    if len(alphas) == 0:
        raise UserError(
            "length_penalties=[] is empty: give the α values to try, e.g. 'length_penalties=[0.6,1.0,1.4]'"
        )
    if decode.beam_size < 2:
        raise UserError(
            f"length_penalties needs beam search, not decode.beam_size={decode.beam_size}: the "
            "length penalty only ranks a beam's hypotheses; use decode=beam"
        )
