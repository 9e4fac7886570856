"""Aligning a corpus with a trained model, as ``scripts/align.py`` does: inputs, readings, table.

Each reading is a (method, shift) pair of ``score_layers``: the argmax row of each target word,
the same one row later ("shift", Chen et al. 2020), the intersection of both directions, and
"full": the argmax row of attention captured with the whole target as the decoder's context
(the reading of a head trained with ``align.full_context``; Garg et al. 2019).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

from torch import Tensor

from transformer_mt.analysis.alignment import (
    LayerScores,
    Links,
    corpus_attention,
    drop_outside,
    format_pharaoh,
    parse_head,
    read_pharaoh,
    score_heads,
    score_layers,
)
from transformer_mt.errors import UserError

READINGS = {
    "argmax": dict(method="argmax", shift=False),
    "shift": dict(method="argmax", shift=True),
    "intersect": dict(method="intersect", shift=False),
    "full": dict(method="argmax", shift=False),
}
FULL_CONTEXT = frozenset({"full"})  # readings of attention captured with the whole target seen

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


@dataclass
class CorpusAttention:
    """Word-level cross-attention of a corpus, captured both ways (``corpus_attention``)."""

    causal: list[Tensor]  # as the model predicts: row t sees the target before t
    full: list[Tensor]  # with the whole target as context

    def of(self, reading: str) -> list[Tensor]:
        """The attention a reading (a key of ``READINGS``) is read from."""
        return self.full if reading in FULL_CONTEXT else self.causal


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


def format_grid(grid: list[list[LayerScores]]) -> str:
    """AER per layer (rows) and head (columns), the last column the heads' mean."""
    n_heads = len(grid[0]) - 1
    lines = ["layer  " + " ".join(f"{'h' + str(h + 1):>6}" for h in range(n_heads)) + "    mean"]
    for row in grid:
        cells = " ".join(f"{s.aer:6.3f}" for s in row[:-1])
        lines.append(f"{row[0].layer:>5}  {cells}  {row[-1].aer:6.3f}")
    return "\n".join(lines)


@dataclass
class BestHead:
    """The head (or layer mean, ``head`` None) and reading with the lowest AER."""

    layer: int
    head: int | None
    reading: str
    aer: float

    @classmethod
    def of(cls, grids: dict[str, list[list[LayerScores]]]) -> BestHead:
        name, s = min(
            ((n, s) for n, grid in grids.items() for row in grid for s in row),
            key=lambda item: item[1].aer,
        )
        return cls(s.layer, s.head, name, s.aer)

    def save(self, path: Path, grids: dict[str, list[list[LayerScores]]], what: str) -> None:
        record = {
            **asdict(self),
            "scored_on": what,
            "grids": {
                name: [[round(s.aer, 4) for s in row] for row in grid]
                for name, grid in grids.items()
            },
        }
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, run_dir: Path) -> BestHead:
        """The head ``scripts/align.py`` recorded for a run (``RUN_DIR/align/best_head.json``)."""
        run = run_folder(run_dir)
        path = run / "align" / "best_head.json"
        if not path.is_file():
            raise UserError(
                f"{path} does not exist: run scripts/align.py {run} --src ... --tgt ... --gold ... "
                f"first, or name the head as L:H"
            )
        record = json.loads(path.read_text(encoding="utf-8"))
        return cls(record["layer"], record["head"], record["reading"], record["aer"])


class HeadChoice(NamedTuple):
    """What ``--head`` picked: where to read, and how."""

    layer: int  # 1-based
    head: int | None  # 1-based; None: the heads averaged
    shift: bool  # read target word j from row j + 1
    full_context: bool  # capture with the whole target as context


def run_folder(path: Path) -> Path:
    """The run directory of ``path``: itself, or the run a checkpoint file belongs to."""
    path = Path(path)
    if path.is_dir():
        return path
    return path.parent.parent if path.parent.name == "checkpoints" else path.parent


def guided_choice(run_dir: Path, n_layers: int) -> HeadChoice | None:
    """The head a run trained with ``align.guided``, read as it was trained (its config.yaml's
    ``align.layer``/``head``/``full_context``/``shift``); None for a run without guidance."""
    from omegaconf import OmegaConf

    path = run_folder(run_dir) / "config.yaml"
    align = OmegaConf.select(OmegaConf.load(path), "align") if path.is_file() else None
    if align is None or not align.get("guided", False):
        return None
    layer = align.layer if align.layer > 0 else n_layers + align.layer + 1
    return HeadChoice(
        layer, align.head, bool(align.get("shift", False)), bool(align.get("full_context", False))
    )


def resolve_head(
    text: str, run_dir: Path, n_layers: int, n_heads: int, full_context: bool = False
) -> HeadChoice:
    """``--head`` (and ``--full-context``) of the scripts -> a ``HeadChoice``.

    ``best`` is the head ``scripts/align.py`` recorded for the run, with its reading (which
    decides shift and full context); ``guided`` the head the run trained with
    ``align.guided``, read as trained; ``L:H`` and ``L`` are read as written
    (``parse_head``), unshifted, with the full target as context when ``full_context``.
    """
    if text == "best":
        best = BestHead.load(run_dir)
        shift, full = READINGS[best.reading]["shift"], best.reading in FULL_CONTEXT
        return HeadChoice(best.layer, best.head, shift, full)
    if text == "guided":
        choice = guided_choice(run_dir, n_layers)
        if choice is None:
            raise UserError(
                f"--head guided: {run_folder(run_dir)} was not trained with align.guided=true "
                f"(its config.yaml says so); name a head as L:H, or best after scripts/align.py"
            )
        return choice
    layer, head = parse_head(text, n_layers, n_heads)
    return HeadChoice(layer, head, False, full_context)
