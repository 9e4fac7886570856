"""``evaluate(cfg)``: decode a split of a trained run and score it as the paper does, and with SacreBLEU."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from transformer_mt.checkpoint import load_model, run_data_config
from transformer_mt.config import DataConfig, DecodeConfig, FinalEvalConfig, check_keys
from transformer_mt.data.sources import load_corpus
from transformer_mt.decoding import quantize_for_decoding, translate
from transformer_mt.deploy.ct2 import CT2Translator
from transformer_mt.distributed import refuse_several_processes
from transformer_mt.errors import UserError
from transformer_mt.metrics import corpus_bleu, corpus_chrf, literature_bleus

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


def corpus_split(corpus, name: str, data_cfg: DataConfig):
    """``corpus[name]``, or an error naming the splits there are."""
    if name not in corpus:
        raise UserError(
            f"split={name}: data={data_cfg.name} has {', '.join(corpus)}; further test sets "
            "come from the files data.local_files (with data.local_dir) or data.files names"
        )
    return corpus[name]


def final_evaluation(run_dir: Path, final: FinalEvalConfig, data_cfg: DataConfig) -> dict:
    """The evaluation a paper reports, after training, every choice made on the validation split:
    the number of last checkpoints averaged (of ``final.average_last``, by greedy BLEU), then the
    length penalty α (of ``final.length_penalties``, by beam-search BLEU); then each split of
    ``final.splits`` decoded once with them and scored (``score_translations``).

    Hypotheses go to ``<run>/final/<split>.hyp.txt``.

    Returns:
        ``{"checkpoints", "beam_size", "length_penalty", "valid": {"average_last",
        "length_penalty"}, "splits": {name: scores}}``.
    """
    corpus = load_corpus(data_cfg)
    valid = corpus_split(corpus, "valid", data_cfg)
    by_count, models = [], {}
    for count in sorted(set(final.average_last)):
        try:
            model, tokenizer, sources = load_model(run_dir, average_last=count)
        except FileNotFoundError:  # fewer step checkpoints than that (a short run)
            if not by_count:
                raise
            log.warning("final.average_last: %s has fewer than %d step checkpoints", run_dir, count)
            break
        hyps = _decoder(model, tokenizer, valid)(DecodeConfig(beam_size=1))
        bleu = corpus_bleu(hyps, list(valid["tgt"]))
        by_count.append({"average_last": len(sources), "greedy_bleu": round(bleu.score, 2)})
        models[len(sources)] = model, tokenizer, sources
    chosen = max(by_count, key=lambda r: (r["greedy_bleu"], -r["average_last"]))
    model, tokenizer, sources = models[chosen["average_last"]]
    decode = DecodeConfig(beam_size=final.beam_size)
    rows, best, _ = length_penalty_rows(
        _decoder(model, tokenizer, valid), decode, list(valid["tgt"]), final.length_penalties
    )
    decode = replace(decode, length_penalty=best["length_penalty"])
    print(
        f"final evaluation, choices on valid ({len(valid)} sentences): checkpoints averaged, "
        "greedy BLEU:",
        *(
            f"  {r['average_last']:<3d} BLEU {r['greedy_bleu']:6.2f}"
            + ("  <- best" if r is chosen else "")
            for r in by_count
        ),
        f"then beam {decode.beam_size}, per length penalty α:",
        *alpha_lines(rows, best),
        sep="\n",
    )
    out = run_dir / "final"
    out.mkdir(exist_ok=True)
    scored = {}
    for name in final.splits:
        split = corpus_split(corpus, name, data_cfg)
        hyps = _decoder(model, tokenizer, split)(decode)
        scores, lines = score_translations(hyps, split["tgt"], data_cfg)
        scored[name] = {**scores, "sentences": len(hyps)}
        (out / f"{name}.hyp.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        print(
            f"{name} ({len(hyps)} sentences), {len(sources)} checkpoint(s) averaged, beam "
            f"{decode.beam_size}, α {decode.length_penalty:g}:",
            *lines,
            sep="\n",
        )
    return {
        "checkpoints": [Path(p).name for p in sources],
        "beam_size": decode.beam_size,
        "length_penalty": decode.length_penalty,
        "valid": {"average_last": by_count, "length_penalty": rows},
        "splits": scored,
    }


def _decoder(model, tokenizer, split) -> Callable[[DecodeConfig], list[str]]:
    """``decode(settings)``: the split's sources translated, the best hypothesis of each."""
    sources = list(split["src"])

    def decode(settings: DecodeConfig) -> list[str]:
        return [r[0].text for r in translate(model, tokenizer, sources, settings, progress=True)]

    return decode


def score_translations(
    hyps: Sequence[str], refs: Sequence[str], data_cfg: DataConfig
) -> tuple[dict, list[str]]:
    """SacreBLEU and chrF (with signatures), and the tokenized BLEUs the data's literature
    reports (``literature_bleus``: compound-split for a German target, lowercased for Multi30k).

    Returns:
        the scores by name, and the lines that print them.
    """
    hyps, refs = list(hyps), list(refs)
    bleu, chrf = corpus_bleu(hyps, refs), corpus_chrf(hyps, refs)
    scores = {
        "bleu": round(bleu.score, 2),
        "bleu_signature": bleu.signature,
        "chrf": round(chrf.score, 2),
        "chrf_signature": chrf.signature,
    }
    lines = [f"  SacreBLEU: {bleu.text}", f"  signature: {bleu.signature}", f"  {chrf.text}"]
    labels = {
        "bleu_tokenized_compound_split": "paper-comparable (Moses-tokenized, compound-split) BLEU",
        "bleu_tokenized_lowercase": "Multi30k-comparable (Moses-tokenized, lowercased) BLEU",
    }
    for key, metric in literature_bleus(data_cfg.name, data_cfg.tgt_lang).items():
        score = metric(hyps, refs, lang=data_cfg.tgt_lang)
        scores[key] = round(score.score, 2)
        lines.append(f"  {labels[key]}: {score.score:.2f}")
    return scores, lines


def length_penalty_rows(
    decode_split: Callable[[DecodeConfig], list[str]],
    decode: DecodeConfig,
    refs: Sequence[str],
    alphas: Sequence[float],
) -> tuple[list[dict], dict, str]:
    """BLEU, chrF and length ratio of ``decode_split`` at each α; the best row (ties: the α
    nearest ``decode.length_penalty``) and the BLEU signature."""
    rows = []
    for alpha in alphas:
        hyps = decode_split(replace(decode, length_penalty=float(alpha)))
        bleu, chrf = corpus_bleu(hyps, list(refs)), corpus_chrf(hyps, list(refs))
        rows.append(
            {
                "length_penalty": float(alpha),
                "bleu": round(bleu.score, 2),
                "chrf": round(chrf.score, 2),
                "length_ratio": round(bleu.length_ratio, 3),
            }
        )
    best = max(rows, key=lambda r: (r["bleu"], -abs(r["length_penalty"] - decode.length_penalty)))
    return rows, best, bleu.signature


def alpha_lines(rows: list[dict], best: dict) -> list[str]:
    return [
        f"  α {r['length_penalty']:<5g} BLEU {r['bleu']:6.2f}  chrF {r['chrf']:6.2f}  "
        f"output/reference length {r['length_ratio']:.3f}" + ("  <- best" if r is best else "")
        for r in rows
    ]


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
