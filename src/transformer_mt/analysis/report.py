"""Aligning a corpus with a trained model, as ``scripts/align.py`` does: inputs, readings, table.

Each reading is a ``HeadReading`` mode with a ``hard_alignment`` method: the argmax row of each
target word, the same one row later ("shift", Chen et al. 2020), the intersection of both
directions, and "full": the argmax row of attention captured with the whole target as the
decoder's context (Garg et al. 2019).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from transformer_mt.align.links import Gold, read_pharaoh, scores_by_length
from transformer_mt.align.reading import READING_MODES, BestHead, HeadReading
from transformer_mt.analysis.alignment import (
    LayerScores,
    corpus_attention,
    score_heads,
    score_layers,
)
from transformer_mt.checkpoint import run_data_config
from transformer_mt.data.sources import demo_files
from transformer_mt.errors import UserError

# name -> how ``score_layers`` reads it (its mode, and its hard_alignment method)
READINGS = {
    name: dict(method="intersect" if name == "intersect" else "argmax", mode=mode)
    for name, mode in READING_MODES.items()
}


def reading_name(reading: HeadReading) -> str:
    """The ``READINGS`` name of a head's own reading (argmax rows in its mode)."""
    return next(n for n, how in READINGS.items() if how == dict(method="argmax", mode=reading.mode))


def demo_pairs(run_dir: Path, split: str, limit: int) -> tuple[list[str], list[str], Gold]:
    """The first ``limit`` pairs of a demo run's split with the generator's gold alignments."""
    data = run_data_config(run_dir)
    if data.source != "demo":
        raise UserError(
            f"{run_dir} was trained on data={data.name}: pass --src and --tgt (and --gold) "
            f"files; gold alignments are built in for the demo corpus only"
        )
    with open(demo_files(data)[split], encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(limit), f)]
    gold = [read_pharaoh(r["alignment"]) for r in rows]
    return [r["src"] for r in rows], [r["tgt"] for r in rows], gold


@dataclass
class CorpusAttention:
    """Word-level cross-attention of a corpus, captured both ways (``corpus_attention``)."""

    causal: list[Tensor]  # as the model predicts: row t sees the target before t
    full: list[Tensor]  # with the whole target as context

    def of(self, reading: str) -> list[Tensor]:
        """The attention a reading (a key of ``READINGS``) is read from."""
        return self.full if READING_MODES[reading] == "full" else self.causal


def attend_corpus(model, tokenizer, sources: list[str], targets: list[str]) -> CorpusAttention:
    """``corpus_attention``, causal and full-context, with progress bars; text that does not
    fold into words is a UserError."""
    try:
        return CorpusAttention(
            *(
                corpus_attention(model, tokenizer, sources, targets, True, full_context=full)
                for full in (False, True)
            )
        )
    except ValueError as err:
        raise UserError(str(err)) from None


def score_readings(attention: CorpusAttention, gold: Gold | None) -> dict[str, list[LayerScores]]:
    """Every reading of every decoder layer (heads averaged)."""
    return {name: score_layers(attention.of(name), gold, **how) for name, how in READINGS.items()}


def score_head_grids(attention: CorpusAttention, gold: Gold) -> dict[str, list[list[LayerScores]]]:
    """``score_heads`` in every reading: reading -> per layer, every head and the mean."""
    return {name: score_heads(attention.of(name), gold, **how) for name, how in READINGS.items()}


def best_reading(rows: dict[str, list[LayerScores]]) -> tuple[str, LayerScores]:
    """The reading and layer with the lowest AER."""
    return min(((n, s) for n, r in rows.items() for s in r), key=lambda item: item[1].aer)


def pick_layer(scores: list[LayerScores]) -> LayerScores:
    """The best layer against the gold, else the last."""
    if scores[0].aer is not None:
        return min(scores, key=lambda s: s.aer)
    return scores[-1]


def format_table(rows: dict[str, list[LayerScores]]) -> str:
    """Per layer: AER/P/R of each reading (with gold), entropy against log(n), coverage."""
    plain = rows["argmax"]
    scored = plain[0].aer is not None
    head = "layer"
    if scored:
        head += "  " + "  ".join(f"{name + ' AER/P/R':<20}" for name in rows)
    head += "  entropy  log(n)  H(tau=.5)  H(tau=2)  uncovered"
    lines = [head]
    for i, s in enumerate(plain):
        line = f"{s.layer:>5}"
        if scored:
            line += "  " + "  ".join(
                f"{r[i].aer:.3f} {r[i].precision:.3f} {r[i].recall:.3f}  " for r in rows.values()
            )
        tau = s.entropy_by_tau
        line += f"  {s.entropy:7.3f}  {s.uniform:6.3f}  {tau[0.5]:9.3f}  {tau[2.0]:8.3f}  {s.uncovered:9.1%}"
        lines.append(line)
    return "\n".join(lines)


def format_grid(grid: list[list[LayerScores]]) -> str:
    """AER per layer (rows) and head (columns), the last column the heads' mean."""
    n_heads = len(grid[0]) - 1
    lines = ["layer  " + " ".join(f"{'h' + str(h + 1):>6}" for h in range(n_heads)) + "    mean"]
    for row in grid:
        cells = " ".join(f"{s.aer:6.3f}" for s in row[:-1])
        lines.append(f"{row[0].layer:>5}  {cells}  {row[-1].aer:6.3f}")
    return "\n".join(lines)


def best_head(grids: dict[str, list[list[LayerScores]]]) -> BestHead:
    """The head (or layer mean) and reading with the lowest AER of ``score_head_grids``."""
    name, s = min(
        ((n, s) for n, grid in grids.items() for row in grid for s in row),
        key=lambda item: item[1].aer,
    )
    return BestHead(s.layer, s.head, name, s.aer)


def aer_grids(grids: dict[str, list[list[LayerScores]]]) -> dict[str, list[list[float]]]:
    """The AER of every reading, layer and head, rounded, as ``BestHead.save`` records them."""
    return {name: [[round(s.aer, 4) for s in row] for row in grid] for name, grid in grids.items()}


def format_by_length(links: list, gold: Gold, sources: list[str], minus: list | None = None) -> str:
    """AER (sentences) per source-length bucket, as ``1-10: 0.123 (40)  11-20: ...``; with
    ``minus`` (another aligner's links on the same pairs) the difference to its AER in each
    bucket, signed: where a gap between the two lives."""
    lengths = [len(s.split()) for s in sources]
    buckets = scores_by_length(links, gold, lengths)
    if minus is None:
        return "  ".join(f"{name}: {aer:.3f} ({n})" for name, (aer, _, _, n) in buckets.items())
    other = scores_by_length(minus, gold, lengths)
    return "  ".join(
        f"{name}: {aer - other[name][0]:+.3f} ({n})" for name, (aer, _, _, n) in buckets.items()
    )
