"""Aligning a corpus with a trained model, as ``scripts/align.py`` does: inputs, readings, table.

Each reading is a (method, shift) pair of ``score_layers``: the argmax row of each target word,
the same one row later ("shift", Chen et al. 2020), and the intersection of both directions.
"""

from __future__ import annotations

import json
from pathlib import Path

from torch import Tensor

from transformer_mt.analysis.alignment import (
    LayerScores,
    Links,
    corpus_attention,
    drop_outside,
    format_pharaoh,
    read_pharaoh,
    score_layers,
)
from transformer_mt.errors import UserError

READINGS = {
    "argmax": dict(method="argmax", shift=False),
    "shift": dict(method="argmax", shift=True),
    "intersect": dict(method="intersect", shift=False),
}

Gold = list[tuple[Links, Links]]


def read_sentences(path: Path) -> list[str]:
    """One sentence per line; an empty line or a file that is not UTF-8 is refused, naming the line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not UTF-8 text ({err})") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            raise UserError(f"{path}:{n}: empty line; every line must hold one sentence")
    return lines


def demo_pairs(run_dir: Path, split: str, limit: int) -> tuple[list[str], list[str], Gold]:
    """The first ``limit`` pairs of a demo run's split with the generator's gold alignments."""
    from transformer_mt.checkpoint import run_data_config
    from transformer_mt.data.dataset import demo_files

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


def clean_gold(
    gold: Gold, sources: list[str], targets: list[str], path: Path
) -> tuple[Gold, list[str]]:
    """Gold links outside their sentences left out (a known typo of a gold set), with a warning each."""
    try:
        cleaned, dropped = drop_outside(gold, sources, targets)
    except ValueError as err:
        raise UserError(f"{path}: {err}") from None
    warnings = [
        f"{path} sentence {n}: links {format_pharaoh(bad)} fall outside "
        f"{len(sources[n - 1].split())} source x {len(targets[n - 1].split())} target words; "
        f"left out (wrong --one-indexed or --reverse-gold?)"
        for n, bad in dropped.items()
    ]
    return cleaned, warnings


def attend_corpus(model, tokenizer, sources: list[str], targets: list[str]) -> list[Tensor]:
    """``corpus_attention`` with a progress bar; text that does not fold into words is a UserError."""
    try:
        return corpus_attention(model, tokenizer, sources, targets, progress=True)
    except ValueError as err:
        raise UserError(str(err)) from None


def score_readings(attention: list[Tensor], gold: Gold | None) -> dict[str, list[LayerScores]]:
    """Every reading of every decoder layer (heads averaged)."""
    return {name: score_layers(attention, gold, **how) for name, how in READINGS.items()}


def best_reading(rows: dict[str, list[LayerScores]]) -> tuple[str, LayerScores]:
    """The reading and layer with the lowest AER."""
    return min(((n, s) for n, r in rows.items() for s in r), key=lambda item: item[1].aer)


def pick_layer(scores: list[LayerScores], layer: int | None) -> LayerScores:
    """Layer ``layer`` (1-based), else the best against the gold, else the last."""
    if layer is not None:
        if not 1 <= layer <= len(scores):
            raise UserError(f"--layer {layer}: the model has layers 1..{len(scores)}")
        return scores[layer - 1]
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
