"""Hard word links from one soft alignment matrix, and the choice of every reading parameter
on development data.

A head's word-level attention (target words' rows over source words, EOS column left out)
is read as links in one of two ways (``EXTRACTIONS``):

- ``argmax``: each target word to its most attended source word: exactly one link per target
  word, which cannot express an unaligned word or a one-to-many link;
- ``grow-diag`` (tau): grow-diag-final-and (Koehn et al. 2003) on a single matrix: the row
  argmaxes (target->source) and the column argmaxes (source->target) of at least tau are the
  two directions, their intersection grown towards their union. tau = 0 keeps every argmax.

Before either, the matrix may be weighed (``Extraction.weigh``):

- by a diagonal prior of width w words (``diagonal``): cell (j, i) times exp(-|i - c_j| / w),
  each row rescaled to the mass it had: the distortion prior of IBM-style aligners, in words,
  so that one word off costs the same in a short sentence as in a long one. c_j is row j's
  place on the straight diagonal, j·W_src/W_tgt. A head trained on short pairs spreads its
  weight over far source words of a long one; the prior keeps links near the diagonal unless
  the head's weight says otherwise.
- past ``narrows_past`` source words the width shrinks in proportion, to w·narrows_past/W_src:
  the longer the sentence, the more far cells there are to stray to.
- past ``anchored_past`` source words the prior is centred on the sentence's own path instead
  of the straight diagonal (``anchored_path``): a line through its anchors, the cells that win
  both their row and their column under the straight prior, kept where they rise in order. A
  long sentence strays from the straight diagonal (a clause with no counterpart, a phrase
  moved); its anchors say where.
- words spelled alike (``alike``, a strength s below 1): a source and a target word written the
  same, lowercased and without outer punctuation (names, numbers), have their cell raised to
  s times their row's largest, so that a link the attention half sees is read, while a row
  with a stronger claim keeps it: the raise never outranks a row's own best cell.

Two directions' matrices (a forward run's and a reverse run's, turned round into the same
(W_tgt, W_src) orientation) are merged cell by cell before any reading (``merge_directions``):
their geometric mean, so that a link must be likely both ways (the agreement of Liang et al.
2006 read from posteriors).

Every parameter of a grow-diag reading is chosen on development data by ``tune`` (coordinate
descent over ``TUNING_GRIDS``; ``scripts/align.py --tune-on`` records the choice with the run),
never on a test set. How each default was measured is in docs/experiments.md.

Legend: W_tgt target words, W_src source words.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace

import torch
from torch import Tensor

from transformer_mt.align.links import Gold, Links, corpus_scores, symmetrize
from transformer_mt.errors import UserError

EXTRACTIONS = ("argmax", "grow-diag")
DEFAULT_TAU = 0.0  # grow-diag's tau when none is given or tuned: every argmax
# The values ``tune`` tries for each parameter of a reading, the plainest first: on a tie the
# earlier value wins, so a parameter that does not help stays off.
TUNING_GRIDS: dict[str, tuple[float, ...]] = {
    "tau": (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4),
    "diagonal": (0.0, 2.0, 4.0, 8.0, 16.0),
    "narrows_past": (0, 20, 30, 50),
    "anchored_past": (0, 20, 30, 50),
    "alike": (0.0, 0.5, 0.7, 0.9),
}
TUNING_ROUNDS = 3  # passes over the parameters at most; tuning stops at a pass that changes none


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


def diagonal_prior(
    weights: Tensor,
    width: float,
    narrows_past: int = 0,
    anchored_past: int = 0,
    alike: Links = frozenset(),
    strength: float = 0.0,
) -> Tensor:
    """``weights`` times exp(-|i - c_j| / w), each row rescaled to its own sum.

    Args:
        weights: (W_tgt, W_src) word-level attention (EOS column left out).
        width: w in source words; 0 returns ``weights`` as they are.
        narrows_past: past this many source words w shrinks to width·narrows_past/W_src
            (0: never).
        anchored_past: past this many source words c_j is row j's place on the path through
            the sentence's anchors (``anchored_path``), found under the straight prior with
            ``alike`` cells raised by ``strength``; else on the straight diagonal (0: never).
        alike: (source i, target j) cells of words spelled alike.
        strength: their raise (``raise_alike``) while anchors are looked for.
    """
    if width == 0 or weights.numel() == 0:
        return weights
    n_tgt, n_src = weights.shape
    if narrows_past and n_src > narrows_past:
        width = width * narrows_past / n_src
    straight = (torch.arange(n_tgt, dtype=torch.float32) + 0.5) * (n_src / n_tgt)  # (W_tgt,)
    weighed = _centred_on(weights, straight, width)
    if not anchored_past or n_src <= anchored_past:
        return weighed
    path = anchored_path(raise_alike(weighed, alike, strength))
    return _centred_on(weights, path, width)


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


def raise_alike(weights: Tensor, alike: Links, strength: float) -> Tensor:
    """``weights`` with each cell of ``alike`` (source i, target j) raised to at least
    ``strength`` times its row's largest; below 1, a row's own best cell keeps its place."""
    if not alike or strength == 0:
        return weights
    raised = weights.clone()
    floor = weights.max(dim=-1).values * strength  # (W_tgt,)
    for i, j in alike:
        raised[j, i] = torch.maximum(raised[j, i], floor[j])
    return raised


def hard_alignment(weights: Tensor, method: str = "argmax", tau: float | None = None) -> Links:
    """Word links read from one (already weighed) attention matrix.

    Args:
        weights: (W_tgt, W_src) word-level attention (EOS column left out).
        method: one of ``EXTRACTIONS`` (module docstring).
        tau: grow-diag's threshold (None: ``DEFAULT_TAU``); argmax takes none.

    Returns:
        (source i, target j) links.
    """
    if method not in EXTRACTIONS:
        raise ValueError(f"unknown alignment method {method!r}: use {', '.join(EXTRACTIONS)}")
    if tau is not None and method == "argmax":
        raise ValueError(f"alignment method argmax takes no tau, got {tau}")
    if weights.numel() == 0:
        return set()
    if method == "argmax":
        return row_argmax(weights)
    tau = DEFAULT_TAU if tau is None else tau
    return symmetrize(row_argmax(weights, tau), column_argmax(weights, tau), "grow-diag-final-and")


@dataclass(frozen=True)
class Extraction:
    """How a head's weights become links: a method and its tau, and how the matrix is weighed
    first (module docstring). Its one serialised form is ``to_dict`` / ``from_dict``."""

    method: str = "argmax"
    tau: float | None = None  # grow-diag's; None: DEFAULT_TAU (argmax takes none)
    diagonal: float = 0.0  # the diagonal prior's width in words; 0: none
    narrows_past: int = 0  # source words past which the prior narrows in proportion; 0: never
    anchored_past: int = 0  # source words past which it follows the anchors' path; 0: never
    alike: float = 0.0  # words spelled alike raised to this share of their row's best; 0: not
    # where the values came from, for reports ("tuned on xlwa_dev+epps_dev"); not compared
    source: str = field(default="", compare=False)

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
        for name in ("narrows_past", "anchored_past"):
            value = getattr(self, name)
            if value < 0 or value != int(value):
                raise UserError(f"{name} {value}: a number of source words, >= 0 (0: never)")
            object.__setattr__(self, name, int(value))
        if not 0.0 <= self.alike < 1.0:
            raise UserError(
                f"alike {self.alike:g}: a share of the row's largest cell, 0 <= alike < 1 "
                f"(0: words spelled alike are not raised; 1 or more would force their links)"
            )
        if self.method == "grow-diag" and self.tau is None:
            object.__setattr__(self, "tau", DEFAULT_TAU)
        object.__setattr__(self, "diagonal", float(self.diagonal))
        object.__setattr__(self, "alike", float(self.alike))

    def to_dict(self) -> dict:
        """Every parameter by name (not ``source``): the form records and configs hold."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "source"}

    @classmethod
    def from_dict(cls, saved: Mapping, where: str, source: str = "") -> Extraction:
        """``to_dict``'s form back; an unknown key is a UserError naming ``where``."""
        known = {f.name for f in fields(cls)} - {"source"}
        unknown = set(saved) - known
        if unknown:
            raise UserError(
                f"{where}: unknown reading parameter(s) {sorted(unknown)}; known: {sorted(known)}"
            )
        return cls(**saved, source=source)

    def overridden(
        self,
        method: str | None = None,
        tau: float | None = None,
        diagonal: float | None = None,
        alike: float | None = None,
    ) -> Extraction:
        """A command line's ``--method`` / ``--tau`` / ``--diagonal`` / ``--no-alike`` over
        this reading: what is given replaces its value, the rest is kept; a tau alone means
        grow-diag, argmax drops tau."""
        if method is None and tau is None and diagonal is None and alike is None:
            return self
        if method == "argmax" and tau is not None:
            raise UserError("alignment method argmax takes no tau; it is for grow-diag")
        method = method or ("grow-diag" if tau is not None else self.method)
        if method == "argmax":
            tau = None
        elif tau is None:
            tau = self.tau if self.method == "grow-diag" else DEFAULT_TAU
        changed = dict(method=method, tau=tau, source="given")
        if diagonal is not None:
            changed["diagonal"] = diagonal
        if alike is not None:
            changed["alike"] = float(alike)
        return replace(self, **changed)

    def weigh(self, weights: Tensor, alike: Links = frozenset()) -> Tensor:
        """The matrix this reading reads links from: the prior, then words alike raised."""
        prior = diagonal_prior(
            weights, self.diagonal, self.narrows_past, self.anchored_past, alike, self.alike
        )
        return raise_alike(prior, alike, self.alike)

    def links(
        self, weights: Tensor, words: tuple[Sequence[str], Sequence[str]] | None = None
    ) -> Links:
        """Links of one (W_tgt, W_src) matrix; ``words``: the pair's (source, target) words,
        which a reading that raises words spelled alike needs."""
        return hard_alignment(self.weigh(weights, self.alike_cells(weights, words)), *self._read)

    def alike_cells(
        self, weights: Tensor, words: tuple[Sequence[str], Sequence[str]] | None
    ) -> Links:
        """The cells of words spelled alike, if this reading raises them."""
        if not self.alike:
            return set()
        if words is None:
            raise ValueError(f"{self.name}: the pair's words are needed, none were given")
        # a pair read in part (``fit_positions``) has rows and columns for its first words
        return spelled_alike(words[0][: weights.shape[1]], words[1][: weights.shape[0]])

    @property
    def _read(self) -> tuple[str, float | None]:
        return self.method, self.tau

    @property
    def name(self) -> str:
        """``argmax``, ``grow-diag 0.1``, ``grow-diag 0.1, diagonal 8 (narrows past 30,
        anchored past 30), alike 0.9``."""
        name = self.method if self.tau is None else f"{self.method} {self.tau:g}"
        if self.diagonal:
            past = [f"narrows past {self.narrows_past}"] * bool(self.narrows_past) + [
                f"anchored past {self.anchored_past}"
            ] * bool(self.anchored_past)
            name += f", diagonal {self.diagonal:g}" + f" ({', '.join(past)})" * bool(past)
        return name + f", alike {self.alike:g}" * bool(self.alike)


ARGMAX = Extraction()  # one link per target word: the reading of every report unless told


@dataclass(frozen=True)
class Trial:
    """One value ``tune`` tried for one parameter, the others at their values then, and its
    development scores."""

    parameter: str
    value: float
    round: int
    aer: float
    precision: float
    recall: float


def tune(
    matrices: list[Tensor],
    gold: Gold,
    words: list[tuple[Sequence[str], Sequence[str]]] | None = None,
    fixed: Mapping[str, float] | None = None,
    grids: Mapping[str, tuple[float, ...]] = TUNING_GRIDS,
) -> tuple[Extraction, list[Trial]]:
    """Every parameter of a grow-diag reading chosen on a development set: coordinate descent
    from the plain reading (tau 0, nothing weighed), one parameter at a time over its grid,
    the others held, for at most ``TUNING_ROUNDS`` passes; the lowest corpus AER wins, on a
    tie the earlier value of the grid.

    Args:
        matrices: per development pair, (W_tgt, W_src) word-level attention.
        gold: the development pairs' (sure, possible) links; nothing else is read.
        words: per development pair, its (source, target) words; None: words spelled alike
            are not raised (``alike`` stays 0).
        fixed: parameters given, not tuned (e.g. ``{"diagonal": 0.0}`` for the attention
            alone).
        grids: the values tried per parameter (``TUNING_GRIDS``).

    Returns:
        the chosen ``Extraction`` and every ``Trial``, in the order tried.
    """
    fixed = dict(fixed or {})
    if words is None:
        fixed["alike"] = 0.0
    cells = [spelled_alike(*w) for w in words] if words is not None else [set()] * len(matrices)
    current = Extraction("grow-diag", **{"tau": DEFAULT_TAU, **fixed})
    free = [name for name in grids if name not in fixed]
    weighed: dict[tuple, list[Tensor]] = {}
    scored: dict[Extraction, tuple[float, float, float]] = {}

    def score(reading: Extraction) -> tuple[float, float, float]:
        if reading not in scored:
            prior = replace(reading, method="argmax", tau=None)  # what weighing depends on
            if prior not in weighed:
                weighed[prior] = [prior.weigh(m, c) for m, c in zip(matrices, cells, strict=True)]
            links = [hard_alignment(m, *reading._read) for m in weighed[prior]]
            scored[reading] = corpus_scores(links, gold)
        return scored[reading]

    trials: list[Trial] = []
    for round_ in range(1, TUNING_ROUNDS + 1):
        before = current
        for name in free:
            tried = [(replace(current, **{name: value}), value) for value in grids[name]]
            results = [(score(reading), value, reading) for reading, value in tried]
            trials += [Trial(name, value, round_, *s) for s, value, _ in results]
            current = min(results, key=lambda r: r[0][0])[2]  # min keeps the first of ties
        if current == before:
            break
    return current, trials


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
