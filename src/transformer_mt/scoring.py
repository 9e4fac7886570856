"""Scoring translations as a run reports them: SacreBLEU and the tokenized BLEUs of the data's
literature, the length penalty chosen on a split, and a run's final evaluation (``final:``), which
``train.py`` runs after training and ``evaluate.py`` shares its scoring with."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from transformer_mt.checkpoint import load_model
from transformer_mt.config import DataConfig, DecodeConfig, FinalEvalConfig
from transformer_mt.data.sources import load_corpus
from transformer_mt.decoding import translate
from transformer_mt.errors import UserError
from transformer_mt.metrics import corpus_bleu, corpus_chrf, literature_bleus

log = logging.getLogger(__name__)


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


def corpus_split(corpus, name: str, data_cfg: DataConfig):
    """``corpus[name]``, or an error naming the splits there are."""
    if name not in corpus:
        raise UserError(
            f"split={name}: data={data_cfg.name} has {', '.join(corpus)}; further test sets "
            "come from the files data.local_files (with data.local_dir) or data.files names"
        )
    return corpus[name]


def final_evaluation(
    run_dir: Path, final: FinalEvalConfig, data_cfg: DataConfig, search: DecodeConfig
) -> dict:
    """The evaluation a paper reports, after training, every choice made on the validation split:
    the number of last checkpoints averaged (of ``final.average_last``, by greedy BLEU), then the
    length penalty α (of ``final.length_penalties``, by beam-search BLEU); then each split of
    ``final.splits`` decoded once with them and scored (``score_translations``). Greedy and
    beam search keep the run's other search settings (``search``: its ``decode``, e.g. the
    maximum output length).

    Hypotheses go to ``<run>/final/<split>.hyp.txt``.

    Returns:
        ``{"checkpoints", "beam_size", "length_penalty", "valid": {"average_last",
        "length_penalty"}, "splits": {name: scores}}``.
    """
    corpus = load_corpus(data_cfg)
    valid = corpus_split(corpus, "valid", data_cfg)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # where the run trained, likely
    by_count, models = [], {}
    for count in sorted(set(final.average_last)):
        try:
            model, tokenizer, sources = load_model(run_dir, device, average_last=count)
            model = model.to(device)
        except FileNotFoundError:  # fewer step checkpoints than that (a short run)
            if not by_count:
                raise
            log.warning("final.average_last: %s has fewer than %d step checkpoints", run_dir, count)
            break
        hyps = _decoder(model, tokenizer, valid)(replace(search, beam_size=1))
        bleu = corpus_bleu(hyps, list(valid["tgt"]))
        by_count.append({"average_last": len(sources), "greedy_bleu": round(bleu.score, 2)})
        models[len(sources)] = model, tokenizer, sources
    chosen = max(by_count, key=lambda r: (r["greedy_bleu"], -r["average_last"]))
    model, tokenizer, sources = models[chosen["average_last"]]
    decode = replace(search, beam_size=final.beam_size)
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
