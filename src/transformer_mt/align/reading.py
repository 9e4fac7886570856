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

Its ``extraction`` says how the rows become links (``transformer_mt.align.extract``). Unless
told, every command reads ``default_reading``: the guided head if the run trained one, else
the best head ``scripts/align.py`` recorded, else the last layer's heads averaged; each by the
tau tuned for the run if one is recorded. A run's records are found from its directory or any
of its checkpoints (``record_folder``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from torch import Tensor

from transformer_mt.align.extract import ARGMAX, RECORD, Extraction, read_tuned, record_folder
from transformer_mt.align.links import Links
from transformer_mt.errors import UserError
from transformer_mt.run_config import load_run_config, run_folder

MODES = ("causal", "shift", "full")


def resolve_index(number: int, count: int, what: str) -> int:
    """A 1-based number, or a negative one counting from the end, -> 1-based; else a UserError."""
    if 1 <= number <= count:
        return number
    if -count <= number <= -1:
        return count + number + 1
    raise UserError(f"{what} {number}: the model has {what}s 1..{count} (or -1..-{count})")


@dataclass(frozen=True)
class HeadReading:
    """A decoder layer's cross-attention head (or its heads' mean), the rows read for words,
    and how their weights become links."""

    layer: int  # 1-based
    head: int | None  # 1-based; None: the layer's heads averaged
    mode: str = "causal"  # one of MODES
    extraction: Extraction = ARGMAX

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UserError(f"reading mode {self.mode!r}: choose one of {', '.join(MODES)}")
        if self.layer < 1 or (self.head is not None and self.head < 1):
            raise ValueError(f"HeadReading is resolved and 1-based, got {self.layer}:{self.head}")

    @classmethod
    def of(
        cls,
        layer: int,
        head: int | None,
        mode: str,
        n_layers: int,
        n_heads: int,
        extraction: Extraction = ARGMAX,
    ) -> HeadReading:
        """Numbers as a user writes them (1-based or negative), checked against the model."""
        layer = resolve_index(layer, n_layers, "layer")
        head = None if head is None else resolve_index(head, n_heads, "head")
        return cls(layer, head, mode, extraction)

    @classmethod
    def from_config(cls, align, n_layers: int, n_heads: int) -> HeadReading:
        """The guided head of an ``AlignConfig``, or of a mapping with its keys (a run's saved
        ``align`` block, a module's hyperparameters); ``extract`` / ``tau`` / ``diagonal`` when
        it has them."""
        get = align.get if isinstance(align, Mapping) else lambda key: getattr(align, key, None)
        layer, head, mode = get("layer"), get("head"), get("mode") or "causal"
        try:
            method, tau, width = get("extract") or "argmax", get("tau"), get("diagonal") or 0.0
            given = "align.tau" if tau is not None else "align.diagonal" if width else ""
            extraction = Extraction(method, tau, width, given)
            return cls.of(layer, head, mode, n_layers, n_heads, extraction)
        except UserError as err:
            raise UserError(f"align.layer={layer} / align.head={head}: {err}") from None

    @property
    def shift(self) -> bool:
        return self.mode == "shift"

    @property
    def full_context(self) -> bool:
        return self.mode == "full"

    def read_by(self, extraction: Extraction) -> HeadReading:
        return replace(self, extraction=extraction)

    def weights(self, words: Tensor) -> Tensor:
        """This reading's word rows of captured cross-attention, EOS column kept.

        Args:
            words: (L, H, W_tgt + 1, W_src + 1) word-level cross-attention, EOS last on both
                axes (captured with the whole target as context in ``full`` mode).

        Returns:
            (W_tgt, W_src + 1): row j for target word j (the next row in ``shift`` mode), the
            head alone or the layer's heads averaged.
        """
        layer = words[self.layer - 1]  # (H, W_tgt + 1, W_src + 1)
        picked = layer if self.head is None else layer[self.head - 1 : self.head]
        rows = picked[:, 1:] if self.shift else picked[:, :-1]  # (h, W_tgt, W_src + 1)
        return rows.mean(dim=0)

    def matrix(self, words: Tensor) -> Tensor:
        """(W_tgt, W_src): ``weights`` without the EOS column, what links are read from."""
        return self.weights(words)[:, :-1]

    def links(
        self, words: Tensor, pair: tuple[Sequence[str], Sequence[str]] | None = None
    ) -> Links:
        """(source i, target j) links of one pair's captured words, read by ``extraction``;
        ``pair``: its (source, target) words, which a reading of words spelled alike needs."""
        return self.extraction.links(self.matrix(words), pair)

    @property
    def name(self) -> str:
        """``L:H`` or ``L``, as ``--head`` takes it, and the mode when not causal."""
        where = f"{self.layer}:{self.head}" if self.head is not None else str(self.layer)
        return where if self.mode == "causal" else f"{where} ({self.mode})"

    @property
    def label(self) -> str:
        """``name`` and how links are read: ``2:1 (shift) by grow-diag 0.1``."""
        return f"{self.name} by {self.extraction.name}"


def guided_reading(run_dir: Path, n_layers: int, n_heads: int) -> HeadReading | None:
    """The head a run trained with ``align.guided``, read as it was trained (its
    ``config.yaml``), by the run's tuned tau if it has one (else by its ``align.extract``);
    None for a run without guidance."""
    if not (run_folder(run_dir) / "config.yaml").is_file():
        return None
    align = load_run_config(run_dir).get("align")
    if align is None or not align.get("guided", False):
        return None
    reading = HeadReading.from_config(align, n_layers, n_heads)
    tuned = read_tuned(record_folder(run_dir) / RECORD)
    return reading if tuned is None else reading.read_by(tuned)


@dataclass(frozen=True)
class BestHead:
    """The reading with the lowest AER against a gold set, as ``scripts/align.py`` records
    it in ``RUN_DIR/align/best_head.json``."""

    reading: HeadReading
    aer: float

    def save(self, path: Path, grids: dict[str, list[list[float]]], what: str) -> None:
        """Write the record with the AER grids it was chosen from (mode -> layer -> head)."""
        r = self.reading
        record = {
            "layer": r.layer,
            "head": r.head,
            "mode": r.mode,
            "method": r.extraction.method,
            "tau": r.extraction.tau,
            "diagonal": r.extraction.diagonal,
            "aer": self.aer,
            "scored_on": what,
            "grids": grids,
        }
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, run_dir: Path) -> BestHead | None:
        """The run's record (of a run directory or any of its checkpoints); None if none."""
        path = record_folder(run_dir) / "best_head.json"
        if not path.is_file():
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
        if "mode" not in record:
            raise UserError(
                f"{path} was written by an older scripts/align.py: score the run again "
                f"(scripts/align.py {run_folder(run_dir)} --src ... --tgt ... --gold ...)"
            )
        width = record.get("diagonal", 0.0)  # records from before the prior have none
        extraction = Extraction(record["method"], record["tau"], width, "recorded")
        reading = HeadReading(record["layer"], record["head"], record["mode"], extraction)
        return cls(reading, record["aer"])


def default_reading(run_dir: Path | None, n_layers: int, n_heads: int) -> HeadReading:
    """The head every command reads unless told: the guided head if the run trained one, else
    the best head ``scripts/align.py`` recorded, else the last layer's heads averaged (by the
    run's tuned tau if it has one, else argmax)."""
    if run_dir is None:
        return HeadReading(n_layers, None)
    guided = guided_reading(run_dir, n_layers, n_heads)
    if guided is not None:
        return guided
    best = BestHead.load(run_dir)
    if best is not None:
        return best.reading
    return HeadReading(n_layers, None, extraction=Extraction.for_run(folder=record_folder(run_dir)))


def parse_head(
    text: str | None,
    n_layers: int,
    n_heads: int,
    run_dir: Path | None = None,
    mode: str | None = None,
    method: str | None = None,
    tau: float | None = None,
    diagonal: float | None = None,
    alike: bool | None = None,
) -> HeadReading:
    """``--head`` (with ``--mode``, ``--method``, ``--tau``, ``--diagonal`` and
    ``--no-alike``) of every command line -> a ``HeadReading``.

    ``L:H`` is a head, ``L`` a layer's heads averaged (1-based; negative from the end), read
    in ``mode`` (default causal); ``best`` is the reading ``scripts/align.py`` recorded for the
    run, ``guided`` the head the run trained with ``align.guided``, read as trained; None is
    ``default_reading``. ``method`` / ``tau`` / ``diagonal`` / ``alike`` override how links are
    read; otherwise a head brings its own (the recorded best's, else the run's tuned tau, else
    argmax).
    """
    if text in (None, "best", "guided"):
        if mode is not None:
            raise UserError(
                f"--mode {mode} goes with --head L:H or L; "
                f"{'the default head' if text is None else f'--head {text}'} brings its own"
            )
        if text is not None and run_dir is None:
            raise UserError(f"--head {text} needs a run directory to look it up in")
        reading = named_reading(text, n_layers, n_heads, run_dir)
    else:
        reading = numbered_reading(text, n_layers, n_heads, mode or "causal")
        if run_dir is not None:
            reading = reading.read_by(Extraction.for_run(folder=record_folder(run_dir)))
    if method is None and tau is None and diagonal is None and alike is None:
        return reading
    folder = record_folder(run_dir) if run_dir is not None else None
    return reading.read_by(Extraction.for_run(method, tau, folder, diagonal=diagonal, alike=alike))


def named_reading(text: str | None, n_layers: int, n_heads: int, run_dir: Path) -> HeadReading:
    """``--head best``, ``--head guided`` or no ``--head`` at all, looked up in the run."""
    if text is None:
        return default_reading(run_dir, n_layers, n_heads)
    if text == "best":
        best = BestHead.load(run_dir)
        if best is None:
            raise UserError(
                f"--head best: {record_folder(run_dir) / 'best_head.json'} does not exist: run "
                f"scripts/align.py {run_folder(run_dir)} --src ... --tgt ... --gold ... first, "
                f"or name the head as L:H"
            )
        return best.reading
    reading = guided_reading(run_dir, n_layers, n_heads)
    if reading is None:
        raise UserError(
            f"--head guided: {run_folder(run_dir)} was not trained with align.guided=true "
            f"(its config.yaml says so); name a head as L:H, or best after scripts/align.py"
        )
    return reading


def numbered_reading(text: str, n_layers: int, n_heads: int, mode: str) -> HeadReading:
    """``--head L:H`` or ``--head L`` in ``mode``, checked against the model."""
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
