"""Which cross-attention head is read as an alignment, and how: ``HeadReading``.

One frozen value names a head for every consumer (training's guided loss and validation AER,
``scripts/align.py``, ``translate.py --alignments``, ``plot_alignment.py``, the explorer and the
benchmarks), and ``parse_head`` is the one parser of ``--head``. Layer and head numbers are
1-based; negative numbers count from the end and are resolved here, nowhere else.

The three modes say which row of the head stands for target word j and what it saw:

- ``causal``: the row that predicts word j, as the model decodes (it has not seen j yet);
- ``shift``: the next row, where word j is the decoder's input (Chen et al. 2020);
- ``full``: the row of j in a pass whose self-attention sees the whole target (Garg et al.
  2019's full context; one more pass through the decoder).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from transformer_mt.errors import UserError
from transformer_mt.run_config import load_run_config, run_folder

MODES = ("causal", "shift", "full")
# The modes of the readings that scripts/align.py scores and records as a run's best head.
READING_MODES = {"argmax": "causal", "shift": "shift", "intersect": "causal", "full": "full"}


def resolve_index(number: int, count: int, what: str) -> int:
    """A 1-based number, or a negative one counting from the end, -> 1-based; else a UserError."""
    if 1 <= number <= count:
        return number
    if -count <= number <= -1:
        return count + number + 1
    raise UserError(f"{what} {number}: the model has {what}s 1..{count} (or -1..-{count})")


@dataclass(frozen=True)
class HeadReading:
    """A decoder layer's cross-attention head (or its heads' mean) and the rows read for words."""

    layer: int  # 1-based
    head: int | None  # 1-based; None: the layer's heads averaged
    mode: str = "causal"  # one of MODES

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UserError(f"reading mode {self.mode!r}: choose one of {', '.join(MODES)}")
        if self.layer < 1 or (self.head is not None and self.head < 1):
            raise ValueError(f"HeadReading is resolved and 1-based, got {self.layer}:{self.head}")

    @classmethod
    def of(
        cls, layer: int, head: int | None, mode: str, n_layers: int, n_heads: int
    ) -> HeadReading:
        """Numbers as a user writes them (1-based or negative), checked against the model."""
        layer = resolve_index(layer, n_layers, "layer")
        head = None if head is None else resolve_index(head, n_heads, "head")
        return cls(layer, head, mode)

    @classmethod
    def from_config(cls, align, n_layers: int, n_heads: int) -> HeadReading:
        """The guided head of an ``AlignConfig``, or of a mapping with its keys (a run's saved
        ``align`` block, a module's hyperparameters)."""
        get = align.get if isinstance(align, Mapping) else lambda key: getattr(align, key)
        layer, head, mode = get("layer"), get("head"), get("mode")
        try:
            return cls.of(layer, head, mode, n_layers, n_heads)
        except UserError as err:
            raise UserError(f"align.layer={layer} / align.head={head}: {err}") from None

    @property
    def shift(self) -> bool:
        return self.mode == "shift"

    @property
    def full_context(self) -> bool:
        return self.mode == "full"

    @property
    def name(self) -> str:
        """``L:H`` or ``L``, as ``--head`` takes it, and the mode when not causal."""
        where = f"{self.layer}:{self.head}" if self.head is not None else str(self.layer)
        return where if self.mode == "causal" else f"{where} ({self.mode})"


def guided_reading(run_dir: Path, n_layers: int, n_heads: int) -> HeadReading | None:
    """The head a run trained with ``align.guided``, read as it was trained (its
    ``config.yaml``); None for a run without guidance."""
    if not (run_folder(run_dir) / "config.yaml").is_file():
        return None
    align = load_run_config(run_dir).get("align")
    if align is None or not align.get("guided", False):
        return None
    # a run saved before align.mode had no flag set: causal
    saved = {"layer": align.layer, "head": align.head, "mode": align.get("mode", "causal")}
    return HeadReading.from_config(saved, n_layers, n_heads)


@dataclass
class BestHead:
    """The head (or layer mean) and reading with the lowest AER, as ``scripts/align.py``
    records it in ``RUN_DIR/align/best_head.json``."""

    layer: int
    head: int | None
    reading: str  # a key of READING_MODES
    aer: float

    @property
    def head_reading(self) -> HeadReading:
        return HeadReading(self.layer, self.head, READING_MODES[self.reading])

    @property
    def method(self) -> str:
        """The extraction the head scored best with: ``intersect`` for that reading, else
        ``argmax`` (the other readings differ in rows, not in how links are taken)."""
        return "intersect" if self.reading == "intersect" else "argmax"

    def save(self, path: Path, grids: dict[str, list[list[float]]], what: str) -> None:
        """Write the record with the AER grids it was chosen from (reading -> layer -> head)."""
        record = {**asdict(self), "scored_on": what, "grids": grids}
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, run_dir: Path) -> BestHead:
        run = run_folder(run_dir)
        path = run / "align" / "best_head.json"
        if not path.is_file():
            raise UserError(
                f"--head best: {path} does not exist: run scripts/align.py {run} --src ... "
                f"--tgt ... --gold ... first, or name the head as L:H"
            )
        record = json.loads(path.read_text(encoding="utf-8"))
        return cls(record["layer"], record["head"], record["reading"], record["aer"])


def head_method(
    head: str | None, method: str | None, run_dir: Path, best: BestHead | None = None
) -> str:
    """The extraction method of ``--head head --method method``: an explicit method, else the
    best head's own for ``--head best`` (``best``, one just chosen, else the run's record),
    else argmax."""
    if method is not None:
        return method
    if head != "best":
        return "argmax"
    return (best or BestHead.load(run_dir)).method


def parse_head(
    text: str,
    n_layers: int,
    n_heads: int,
    run_dir: Path | None = None,
    mode: str = "causal",
) -> HeadReading:
    """``--head`` of every command line -> a ``HeadReading``.

    ``L:H`` is a head, ``L`` a layer's heads averaged (1-based; negative from the end), read
    in ``mode``; ``best`` is the head and reading ``scripts/align.py`` recorded for the run;
    ``guided`` the head the run trained with ``align.guided``, read as trained.
    """
    if text in ("best", "guided"):
        if run_dir is None:
            raise UserError(f"--head {text} needs a run directory to look it up in")
        if text == "best":
            return BestHead.load(run_dir).head_reading
        reading = guided_reading(run_dir, n_layers, n_heads)
        if reading is None:
            raise UserError(
                f"--head guided: {run_folder(run_dir)} was not trained with align.guided=true "
                f"(its config.yaml says so); name a head as L:H, or best after scripts/align.py"
            )
        return reading
    layer_text, _, head_text = text.partition(":")
    try:
        layer = int(layer_text)
        head = int(head_text) if head_text else None
    except ValueError:
        raise UserError(
            f"--head {text!r}: expected LAYER:HEAD, LAYER, best or guided, e.g. 5:3"
        ) from None
    try:
        return HeadReading.of(layer, head, mode, n_layers, n_heads)
    except UserError as err:
        raise UserError(f"--head {text!r}: {err}") from None
