"""Hard word links from one soft alignment matrix, and the choice of tau on a development set.

A head's word-level attention (target words' rows over source words, EOS column left out)
is read as links in one of two ways (``EXTRACTIONS``):

- ``argmax``: each target word to its most attended source word: exactly one link per target
  word, which cannot express an unaligned word or a one-to-many link;
- ``grow-diag`` (tau): grow-diag-final-and (Koehn et al. 2003) on a single matrix: the row
  argmaxes (target->source) and the column argmaxes (source->target) of at least tau are the
  two directions, their intersection grown towards their union. tau = 0 keeps every argmax.

Either may first weigh the matrix by a diagonal prior (``diagonal``, a width w in words):
cell (j, i) times exp(-|i - j·W_src/W_tgt| / w), each row rescaled to the mass it had, the
distortion prior of IBM-style aligners (fast_align's is relative to the length; ours is in
words, so one word off costs the same in a short sentence as in a long one). A head trained on
short pairs spreads its weight over far source words of a long one (short gold pairs joined 8
at a time: 27% of its links fell outside their own pair); the prior keeps the links near the
diagonal unless the head's weight says otherwise, and the more so the longer the source: past
``NARROWS_PAST`` (30) source words w shrinks to w·30/W_src (a 60-word source reads at w/2),
which left sentences up to 30 words as they were and every long figure measured 0.002-0.022
better. A long sentence strays from the straight diagonal (a clause with no counterpart, a
phrase moved), so past 30 words the prior is centred on the sentence's own path instead: a line
through its anchors, the cells that win both their row and their column under the straight
prior, kept where they rise in order (``anchored_path``). That read news sentences of over 50
words 0.02 closer to eflomal and short pairs joined into 60-word inputs 0.01-0.02 better, and
left sentences up to 30 words as they were. 0 is no prior.

Either may also link words spelled alike (``alike``): a source and a target word written the
same, lowercased and without outer punctuation (names, numbers: 5.8% of XL-WA test's sure
links, of which the merged heads found 75%), have their cell raised to their row's largest
after the prior, so that the reading links them unless the row has a stronger claim.

Grow-diag at a tau tuned on a development set beat argmax on every run scored; a plain
``threshold`` and the argmaxes' ``intersect`` were never the development set's choice and were
removed (docs/experiments.md).

Two directions' matrices (a forward run's and a reverse run's, turned round into the same
(W_tgt, W_src) orientation) are merged cell by cell before any reading (``merge_directions``):
their geometric mean, so that a link must be likely both ways (the agreement of Liang et al.
2006 read from posteriors). It beat their mean and every combination of the two directions'
hard links on both test sets.

tau is chosen on a development gold set only (``tune``; ``scripts/align.py --tune-on`` records
it for a run in ``RUN_DIR/align/extraction.json``), never on a test set. A run with a recorded
tau is read by grow-diag at that tau unless told otherwise (``Extraction.for_run``).

Legend: W_tgt target words, W_src source words.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import Tensor

from transformer_mt.align.links import Gold, Links, corpus_scores, symmetrize
from transformer_mt.errors import UserError
from transformer_mt.run_config import run_folder

EXTRACTIONS = ("argmax", "grow-diag")
DEFAULT_TAU = 0.0  # grow-diag's tau when none is given or recorded: every argmax
TUNING_GRID = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)  # the values ``tune`` tries
# The diagonal prior's width ``tune`` reads at: fixed at 8 words, not chosen by ``tune``, since
# XL-WA dev (105 pairs, few of them long) cannot see what the prior does for long sentences;
# the measurements behind it are in docs/experiments.md ("The prior at the 35-minute budget").
TUNED_DIAGONAL = 8.0
NARROWS_PAST = 30  # source words: a longer source's prior is narrower in proportion
RECORD = "extraction.json"  # in RUN_DIR/align
MERGED_RECORD = "extraction_product.json"  # tau and prior for a head merged with a reverse run's


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


def diagonal_prior(weights: Tensor, width: float, alike: Links = frozenset()) -> Tensor:
    """``weights`` times exp(-|i - c_j| / w), each row rescaled to its own sum, where w is
    ``width``, narrowed to width·30/W_src past ``NARROWS_PAST`` (30) source words, and c_j is
    row j's place on the straight diagonal, j·W_src/W_tgt; past 30 source words, its place on
    the path through the sentence's anchors (``anchored_path``), found under the straight prior
    with ``alike`` cells raised.

    Args:
        weights: (W_tgt, W_src) word-level attention (EOS column left out).
        width: in source words; 0 returns ``weights`` as they are.
        alike: (source i, target j) cells of words spelled alike, anchors if they win their row
            and column.
    """
    if width == 0 or weights.numel() == 0:
        return weights
    n_tgt, n_src = weights.shape
    width = width * min(1.0, NARROWS_PAST / n_src)
    straight = (torch.arange(n_tgt, dtype=torch.float32) + 0.5) * (n_src / n_tgt)  # (W_tgt,)
    weighed = _centred_on(weights, straight, width)
    if n_src <= NARROWS_PAST:
        return weighed
    return _centred_on(weights, anchored_path(raise_alike(weighed, alike)), width)


def _centred_on(weights: Tensor, centre: Tensor, width: float) -> Tensor:
    """``weights`` times exp(-|i + 0.5 - centre_j| / width), rows rescaled to their sums."""
    source = torch.arange(weights.shape[1], dtype=torch.float32) + 0.5  # (W_src,)
    prior = torch.exp(-(centre[:, None] - source[None, :]).abs() / width)
    weighed = weights.float() * prior
    scale = weights.float().sum(-1, keepdim=True) / weighed.sum(-1, keepdim=True).clamp(min=1e-30)
    return (weighed * scale).to(weights.dtype)


def anchored_path(weights: Tensor) -> Tensor:
    """Each target row's expected source place (W_tgt,), in the coordinates of cell centres
    (i + 0.5): a line through the anchors, the cells that are the largest of both their row
    and their column, of which the longest chain rising in both target and source order is
    kept; from corner (0, 0) to corner (W_tgt, W_src), straight between anchors."""
    n_tgt, n_src = weights.shape
    mutual = row_argmax(weights) & column_argmax(weights)
    chain = _rising_chain(sorted((j, i) for i, j in mutual))
    knots = [(0.0, 0.0), *((j + 0.5, i + 0.5) for j, i in chain), (float(n_tgt), float(n_src))]
    x, y = torch.tensor(knots).T.contiguous()  # target places, source places; x rises strictly
    rows = torch.arange(n_tgt, dtype=torch.float32) + 0.5
    right = torch.searchsorted(x, rows, right=True).clamp(1, len(knots) - 1)
    left = right - 1
    return y[left] + (y[right] - y[left]) * (rows - x[left]) / (x[right] - x[left])


def _rising_chain(cells: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest run of (j, i) ``cells`` (sorted by j, each j once) whose i rises too."""
    ends: list[int] = []  # ends[k]: the smallest last i of a chain of k + 1 cells so far
    last: list[int] = []  # last[k]: which cell that is
    before: list[int | None] = []  # per cell, the cell before it in its chain
    for n, (_, i) in enumerate(cells):
        k = bisect.bisect_left(ends, i)
        ends[k : k + 1], last[k : k + 1] = [i], [n]
        before.append(last[k - 1] if k else None)
    chain, n = [], last[-1] if last else None
    while n is not None:
        chain.append(cells[n])
        n = before[n]
    return chain[::-1]


def _spelling(word: str) -> str:
    """A word as ``spelled_alike`` compares it; "" for one too short to say anything."""
    word = re.sub(r"^\W+|\W+$", "", word.lower())
    return word if len(word) >= 2 or word.isdigit() else ""


def spelled_alike(src_words: Sequence[str], tgt_words: Sequence[str]) -> Links:
    """(source i, target j) of words written the same, lowercased and without outer
    punctuation, of 2 characters or more (or digits)."""
    where: dict[str, list[int]] = {}
    for i, word in enumerate(src_words):
        if spelling := _spelling(word):
            where.setdefault(spelling, []).append(i)
    return {(i, j) for j, word in enumerate(tgt_words) for i in where.get(_spelling(word), [])}


def raise_alike(weights: Tensor, alike: Links) -> Tensor:
    """``weights`` with each cell of ``alike`` (source i, target j) raised to just above its
    row's largest, so that argmax and grow-diag see it first."""
    if not alike:
        return weights
    raised = weights.clone()
    top = weights.max(dim=-1).values * 1.01 + 1e-6  # (W_tgt,)
    for i, j in alike:
        raised[j, i] = top[j]
    return raised


def hard_alignment(
    weights: Tensor,
    method: str = "argmax",
    tau: float | None = None,
    diagonal: float = 0.0,
    alike: Links = frozenset(),
) -> Links:
    """Word links read from one attention matrix.

    Args:
        weights: (W_tgt, W_src) word-level attention (EOS column left out).
        method: one of ``EXTRACTIONS`` (module docstring).
        tau: grow-diag's threshold (None: ``DEFAULT_TAU``); argmax takes none.
        diagonal: the diagonal prior's width in words (``diagonal_prior``); 0: none.
        alike: (source i, target j) cells raised after the prior (``raise_alike``).

    Returns:
        (source i, target j) links.
    """
    if method not in EXTRACTIONS:
        raise ValueError(f"unknown alignment method {method!r}: use {', '.join(EXTRACTIONS)}")
    if tau is not None and method == "argmax":
        raise ValueError(f"alignment method argmax takes no tau, got {tau}")
    if weights.numel() == 0:
        return set()
    weights = raise_alike(diagonal_prior(weights, diagonal, alike), alike)
    if method == "argmax":
        return row_argmax(weights)
    tau = DEFAULT_TAU if tau is None else tau
    return symmetrize(row_argmax(weights, tau), column_argmax(weights, tau), "grow-diag-final-and")


@dataclass(frozen=True)
class Extraction:
    """How a head's weights become links: a method, its tau, the diagonal prior's width
    (``--method`` / ``--tau`` / ``--diagonal``, ``align.extract`` / ``align.tau`` /
    ``align.diagonal``) and whether words spelled alike are linked (``--tune-on`` records it)."""

    method: str = "argmax"
    tau: float | None = None  # grow-diag's; None: DEFAULT_TAU (argmax takes none)
    diagonal: float = 0.0  # the diagonal prior's width in words; 0: none
    # where tau came from, for reports ("tuned on dev.tsv"); not part of its identity
    source: str = field(default="", compare=False)
    alike: bool = False  # words spelled alike raised (``spelled_alike``); needs the pair's words

    def __post_init__(self) -> None:
        if self.method not in EXTRACTIONS:
            raise UserError(
                f"alignment method {self.method!r}: choose one of {', '.join(EXTRACTIONS)} "
                f"(threshold and intersect were removed: grow-diag at a tuned tau beat them)"
            )
        if self.tau is not None and self.method == "argmax":
            raise UserError("alignment method argmax takes no tau; it is for grow-diag")
        if self.tau is not None and not 0.0 <= self.tau <= 1.0:
            raise UserError(f"alignment tau {self.tau}: attention weights are 0..1")
        if self.diagonal < 0:
            raise UserError(
                f"diagonal prior width {self.diagonal:g}: a width in words, > 0 (0: no prior)"
            )
        if self.method == "grow-diag" and self.tau is None:
            object.__setattr__(self, "tau", DEFAULT_TAU)
        object.__setattr__(self, "diagonal", float(self.diagonal))

    def links(
        self, weights: Tensor, words: tuple[Sequence[str], Sequence[str]] | None = None
    ) -> Links:
        """Links of one (W_tgt, W_src) matrix; ``words``: the pair's (source, target) words,
        which a reading that links words spelled alike needs."""
        alike: Links = set()
        if self.alike:
            if words is None:
                raise ValueError(f"{self.name}: the pair's words are needed, none were given")
            # a pair read in part (``fit_positions``) has rows and columns for its first words
            alike = spelled_alike(words[0][: weights.shape[1]], words[1][: weights.shape[0]])
        return hard_alignment(weights, self.method, self.tau, self.diagonal, alike)

    @property
    def name(self) -> str:
        """``argmax``, ``grow-diag 0.1``, ``grow-diag 0.1, diagonal 4`` or
        ``grow-diag 0.1, diagonal 8, alike``."""
        name = self.method if self.tau is None else f"{self.method} {self.tau:g}"
        return name + f", diagonal {self.diagonal:g}" * bool(self.diagonal) + ", alike" * self.alike

    @classmethod
    def for_run(
        cls,
        method: str | None = None,
        tau: float | None = None,
        folder: Path | None = None,
        record: str = RECORD,
        diagonal: float | None = None,
        alike: bool | None = None,
    ) -> Extraction:
        """A command line's ``--method`` / ``--tau`` / ``--diagonal`` / ``--no-alike`` for a
        run: what is given wins, then what ``scripts/align.py --tune-on`` recorded in ``folder``
        (``record_folder``; ``record``: ``MERGED_RECORD`` for merged directions), then
        ``DEFAULT_TAU`` and no prior. With no method, grow-diag if a tau is recorded (the
        development sets' choice), else argmax. The recorded width, and whether words spelled
        alike are linked, go with every method."""
        recorded = read_tuned(folder / record) if folder is not None else None
        width = diagonal if diagonal is not None else (recorded.diagonal if recorded else 0.0)
        if alike is None:
            alike = recorded.alike if recorded else False
        if method == "argmax" or tau is not None:
            given = tau is not None or diagonal is not None
            return cls(method or "grow-diag", tau, width, "given" if given else "", alike)
        if recorded is not None:
            return replace(recorded, diagonal=width, alike=alike)
        return cls(method or "argmax", None, width, "default" if method else "", alike)


def read_tuned(path: Path) -> Extraction | None:
    """The extraction ``save_tuned`` recorded at ``path``; None if there is none."""
    if not path.is_file():
        return None
    saved = json.loads(path.read_text(encoding="utf-8"))
    if "tau" not in saved:
        raise UserError(
            f"{path} was written by an older scripts/align.py (its methods were removed): "
            f"tune again with scripts/align.py RUN --tune-on FORMAT:DEV"
        )
    diagonal = saved.get("diagonal", 0.0)  # records from before the prior have none
    alike = saved.get("alike", False)  # nor those from before words spelled alike
    return Extraction("grow-diag", saved["tau"], diagonal, f"tuned on {saved['tuned_on']}", alike)


def record_folder(run_dir: Path) -> Path:
    """Where a run's records (best head, tuned tau) are kept: ``RUN_DIR/align`` of a run
    directory or of any of its checkpoints."""
    return run_folder(run_dir) / "align"


def tune(
    matrices: list[Tensor],
    gold: Gold,
    grid: tuple[float, ...] = TUNING_GRID,
    diagonal: float = TUNED_DIAGONAL,
    words: list[tuple[Sequence[str], Sequence[str]]] | None = None,
) -> tuple[Extraction, list[tuple[float, float, float, float, float]]]:
    """Grow-diag's tau with the lowest AER on a development set, read under the diagonal prior
    of width ``diagonal`` (0: none) and, given the pairs' ``words``, with words spelled alike
    linked.

    Args:
        matrices: per development pair, (W_tgt, W_src) word-level attention.
        gold: the development pairs' (sure, possible) links; nothing else is read.
        words: per development pair, its (source, target) words; None: words alike not linked.

    Returns:
        the best ``Extraction`` (on a tie the smaller tau) and every tau's
        (tau, width, AER, P, R).
    """
    alike = (
        [spelled_alike(*pair) for pair in words] if words is not None else [set()] * len(matrices)
    )
    weighed = [diagonal_prior(m, diagonal, a) for m, a in zip(matrices, alike)]
    table = []
    for tau in grid:
        links = [hard_alignment(m, "grow-diag", tau, 0.0, a) for m, a in zip(weighed, alike)]
        table.append((tau, diagonal, *corpus_scores(links, gold)))
    best = min(table, key=lambda row: (row[2], row[0]))
    return Extraction("grow-diag", best[0], diagonal, alike=words is not None), table


def save_tuned(
    folder: Path,
    chosen: Extraction,
    tuned_on: str,
    table: list,
    record: str = RECORD,
) -> Path:
    """Record a tuned tau, prior width and words alike for a run (``Extraction.for_run``
    reads them)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / record
    saved = {
        "method": "grow-diag",
        "tau": chosen.tau,
        "diagonal": chosen.diagonal,
        "alike": chosen.alike,
        "tuned_on": tuned_on,
        "table": table,
    }
    path.write_text(json.dumps(saved, indent=1) + "\n", encoding="utf-8")
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
