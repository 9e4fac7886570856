"""Hard word links from one soft alignment matrix, and the choice of a method's parameter.

A head's word-level attention (target words' rows over source words, EOS column left out)
is read as links in one of four ways (``EXTRACTIONS``):

- ``argmax``: each target word to its most attended source word: exactly one link per target
  word, which cannot express an unaligned word or a one-to-many link;
- ``intersect``: the argmax links that are also their source word's most attending target word
  (the column's argmax): fewer links, higher precision;
- ``threshold`` (tau): every cell of at least tau: a target word gets zero, one or several links;
- ``grow-diag`` (tau): grow-diag-final-and (Koehn et al. 2003) on a single matrix: the row
  argmaxes (target->source) and the column argmaxes (source->target) of at least tau are the
  two directions, their intersection grown towards their union. tau = 0 keeps every argmax.

Two directions' matrices (a forward run's and a reverse run's, turned round into the same
(W_tgt, W_src) orientation) are merged cell by cell before any reading (``merge_directions``):
their geometric mean, so that a link must be likely both ways (the agreement of Liang et al.
2006 read from posteriors); the merged matrix is then read by any method above. It beat their
mean and every combination of the two directions' hard links (``links.symmetrize``) on both
test sets, and was the development set's choice in every pair of runs scored (the log).

A parameter is chosen on a development gold set only (``tune``; ``scripts/align.py --tune-on``
records it for a run in ``RUN_DIR/align/extraction.json``), never on a test set.

Legend: W_tgt target words, W_src source words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from transformer_mt.align.links import Gold, Links, corpus_scores, symmetrize
from transformer_mt.align.reading import run_folder
from transformer_mt.errors import UserError

EXTRACTIONS = ("argmax", "intersect", "threshold", "grow-diag")
# The methods that take a parameter (tau), the value used when none is given or recorded, and
# the values ``tune`` tries.
PARAMETER_DEFAULTS = {"threshold": 0.3, "grow-diag": 0.0}
TUNING_GRID = {
    "threshold": (0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6),
    "grow-diag": (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4),
}
RECORD = "extraction.json"  # in RUN_DIR/align
MERGED_RECORD = "extraction_product.json"  # tau tuned for a run's head merged with a reverse run's


def row_argmax(weights: Tensor, at_least: float = 0.0) -> Links:
    """(source i, target j) for each row j's largest cell, if it is at least ``at_least``."""
    best, where = weights.max(dim=-1)
    return {
        (int(i), j) for j, (i, w) in enumerate(zip(where.tolist(), best.tolist())) if w >= at_least
    }


def column_argmax(weights: Tensor, at_least: float = 0.0) -> Links:
    """(source i, target j) for each column i's largest cell, if it is at least ``at_least``."""
    best, where = weights.max(dim=-2)
    return {
        (i, int(j)) for i, (j, w) in enumerate(zip(where.tolist(), best.tolist())) if w >= at_least
    }


def hard_alignment(
    weights: Tensor, method: str = "argmax", parameter: float | None = None
) -> Links:
    """Word links read from one attention matrix.

    Args:
        weights: (W_tgt, W_src) word-level attention (EOS column left out).
        method: one of ``EXTRACTIONS`` (module docstring).
        parameter: tau of ``threshold`` and ``grow-diag`` (None: ``PARAMETER_DEFAULTS``);
            the other methods take none.

    Returns:
        (source i, target j) links.
    """
    if method not in EXTRACTIONS:
        raise ValueError(f"unknown alignment method {method!r}: use {', '.join(EXTRACTIONS)}")
    if parameter is not None and method not in PARAMETER_DEFAULTS:
        raise ValueError(f"alignment method {method} takes no parameter, got {parameter}")
    if weights.numel() == 0:
        return set()
    tau = PARAMETER_DEFAULTS.get(method, 0.0) if parameter is None else parameter
    if method == "argmax":
        return row_argmax(weights)
    if method == "intersect":
        return row_argmax(weights) & column_argmax(weights)
    if method == "threshold":
        return {(int(i), int(j)) for j, i in torch.nonzero(weights >= tau).tolist()}
    return symmetrize(row_argmax(weights, tau), column_argmax(weights, tau), "grow-diag-final-and")


@dataclass(frozen=True)
class Extraction:
    """A method and its parameter, as every command line and ``align.extract`` name them."""

    method: str = "argmax"
    parameter: float | None = None  # None: the method's default (or it takes none)
    # where the parameter came from, for reports ("tuned on dev.tsv"); not part of its identity
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.method not in EXTRACTIONS:
            raise UserError(
                f"alignment method {self.method!r}: choose one of {', '.join(EXTRACTIONS)}"
            )
        if self.parameter is not None and self.method not in PARAMETER_DEFAULTS:
            raise UserError(
                f"alignment method {self.method} takes no threshold; it is for "
                f"{' and '.join(PARAMETER_DEFAULTS)}"
            )
        if self.parameter is not None and not 0.0 <= self.parameter <= 1.0:
            raise UserError(f"alignment threshold {self.parameter}: attention weights are 0..1")

    @property
    def tau(self) -> float | None:
        if self.method not in PARAMETER_DEFAULTS:
            return None
        return PARAMETER_DEFAULTS[self.method] if self.parameter is None else self.parameter

    def links(self, weights: Tensor) -> Links:
        return hard_alignment(weights, self.method, self.tau)

    @property
    def name(self) -> str:
        """``argmax``, ``threshold 0.25`` ..."""
        return self.method if self.tau is None else f"{self.method} {self.tau:g}"

    @classmethod
    def for_run(
        cls,
        method: str,
        parameter: float | None,
        folder: Path | None = None,
        record: str = RECORD,
    ) -> Extraction:
        """A command line's ``--method`` / ``--threshold``: an explicit parameter wins, then the
        one ``scripts/align.py --tune-on`` recorded in ``folder`` (a run's ``align`` folder,
        ``record_folder``; ``record``: the file, ``MERGED_RECORD`` for merged directions),
        then the default."""
        if parameter is not None or method not in PARAMETER_DEFAULTS or folder is None:
            return cls(method, parameter, "given" if parameter is not None else "default")
        path = Path(folder) / record
        if path.is_file():
            saved = json.loads(path.read_text(encoding="utf-8"))
            if method in saved.get("parameters", {}):
                return cls(method, saved["parameters"][method], f"tuned on {saved['tuned_on']}")
        return cls(method, None, "default")


def record_folder(run_dir: Path) -> Path:
    """Where a run's tuned parameters are recorded: ``RUN_DIR/align`` (of a checkpoint's run)."""
    return run_folder(run_dir) / "align"


def tune(
    matrices: list[Tensor], gold: Gold, method: str, grid: tuple[float, ...] | None = None
) -> tuple[float, list[tuple[float, float, float, float]]]:
    """The parameter of ``method`` with the lowest AER on a development set.

    Args:
        matrices: per development pair, (W_tgt, W_src) word-level attention.
        gold: the development pairs' (sure, possible) links; nothing else is read.
        grid: the values tried (default ``TUNING_GRID[method]``).

    Returns:
        the best value (the smaller one on a tie) and every value's (tau, AER, P, R).
    """
    if method not in TUNING_GRID:
        raise ValueError(f"{method} has no parameter to tune (only {', '.join(TUNING_GRID)})")
    table = []
    for tau in grid or TUNING_GRID[method]:
        links = [hard_alignment(m, method, tau) for m in matrices]
        table.append((tau, *corpus_scores(links, gold)))
    best = min(table, key=lambda row: (row[1], row[0]))
    return best[0], table


def save_tuned(
    folder: Path, parameters: dict[str, float], tuned_on: str, tables: dict, record: str = RECORD
) -> Path:
    """Record tuned parameters for a run (``Extraction.for_run`` reads them)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / record
    record = {"parameters": parameters, "tuned_on": tuned_on, "tables": tables}
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


def merge_directions(forward: Tensor, backward: Tensor) -> Tensor:
    """Two directions' word-level matrices as one, cell by cell: their geometric mean.

    Args:
        forward: (W_tgt, W_src) a forward head's rows.
        backward: (W_tgt, W_src) a reverse head's rows turned round (its (W_src, W_tgt) matrix
            transposed): each of its columns is one source word's attention.
    """
    if forward.shape != backward.shape:
        raise ValueError(
            f"forward matrix {tuple(forward.shape)} and turned-round reverse matrix "
            f"{tuple(backward.shape)} differ: not the same sentence pair"
        )
    return (forward * backward).sqrt()


def teacher_rows(links: Links, n_tgt: int, n_src: int) -> Tensor:
    """An aligner's links as the attention a head would learn from them: row j uniform over the
    source words linked to target word j, zero where j has no link (its weight would go to
    EOS). Reading these rows back gives the ceiling of each method for a perfectly fitted head."""
    rows = torch.zeros(n_tgt, n_src)
    for i, j in links:
        rows[j, i] = 1.0
    counts = rows.sum(dim=-1, keepdim=True)
    return torch.where(counts > 0, rows / counts.clamp(min=1), rows)


ARGMAX = Extraction()  # one link per target word: the reading of every report unless told
