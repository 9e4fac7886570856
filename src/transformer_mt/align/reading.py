"""Which cross-attention head is read as an alignment, and how: ``HeadReading``.

One frozen value names a head for every consumer (training's guided loss and validation AER,
``scripts/align.py``, ``translate.py --alignments``, ``plot_alignment.py``, the explorer and the
benchmarks), and ``parse_head`` is the one parser of ``--head``. Layer and head numbers are
1-based; negative numbers count from the end and are resolved here, nowhere else. Its one
serialised form is ``to_dict`` / ``from_dict``: the run's records hold it, and the guided
config's ``align`` keys (``CONFIG_KEYS``) are read by ``from_config`` into the same value.

The three modes say which row of the head stands for target word j and what it saw:

- ``causal``: the row that predicts word j, as the model decodes (it has not seen j yet);
- ``shift``: the next row, where word j is the decoder's input (Chen et al. 2020);
- ``full``: the row of j in a pass whose self-attention sees the whole target (Garg et al.
  2019's full context; one more pass through the decoder).

Its ``extraction`` says how the rows become links (``transformer_mt.align.extract``).

The policy, in one place (``default_reading``, ``parse_head``): ``scripts/align.py --tune-on``
chooses a head (the guided one, else the best on the development set) and every parameter of
its reading on development data, and records it as ``RUN_DIR/align/reading.json``. Unless told,
every command reads that reading; without one, the guided head as its config says; else the
last layer's heads averaged, by argmax. A head named on the command line is read by the tuned
parameters when it is the tuned head, else by argmax; ``--method`` / ``--tau`` / ``--diagonal``
/ ``--no-alike`` change what they name and keep the rest. A pair merged with a reverse run
has its own record, ``reading_merged.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from torch import Tensor

from transformer_mt.align.extract import ARGMAX, Extraction, Trial
from transformer_mt.align.links import Links
from transformer_mt.errors import UserError
from transformer_mt.run_config import load_run_config, run_folder

MODES = ("causal", "shift", "full")
# the guided config's reading keys (``align.*``) -> the ``Extraction`` field each one sets
CONFIG_KEYS = {
    "extract": "method",
    "tau": "tau",
    "diagonal": "diagonal",
    "narrows_past": "narrows_past",
    "anchored_past": "anchored_past",
    "alike": "alike",
}
READING_RECORD = "reading.json"  # in RUN_DIR/align: the run's own head, tuned
MERGED_RECORD = "reading_merged.json"  # the head merged with a reverse run's, tuned
# records of the scripts/align.py before one stored reading: they are refused with how to re-tune
OLD_RECORDS = ("best_head.json", "extraction.json", "extraction_product.json")
RETUNE = "scripts/align.py {run} --tune-on xlwa_dev --tune-on epps_dev"


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

    def to_dict(self) -> dict:
        """The one serialised form: ``{"layer", "head", "mode", "extraction": {...}}``."""
        extraction = self.extraction.to_dict()
        return {"layer": self.layer, "head": self.head, "mode": self.mode, "extraction": extraction}

    @classmethod
    def from_dict(cls, saved: Mapping, where: str, source: str = "") -> HeadReading:
        """``to_dict``'s form back; a malformed one is a UserError naming ``where``."""
        try:
            extraction = Extraction.from_dict(saved["extraction"], where, source)
            return cls(saved["layer"], saved["head"], saved["mode"], extraction)
        except (KeyError, TypeError) as err:
            raise UserError(
                f"{where}: not a stored reading ({err!r} missing or malformed)"
            ) from None

    @classmethod
    def from_config(cls, align, n_layers: int, n_heads: int) -> HeadReading:
        """The guided head of an ``AlignConfig``, or of a mapping with its keys (a run's saved
        ``align`` block, a module's hyperparameters), read as its ``CONFIG_KEYS`` say."""
        get = align.get if isinstance(align, Mapping) else lambda key: getattr(align, key, None)
        layer, head, mode = get("layer"), get("head"), get("mode") or "causal"
        given = {field_: get(key) for key, field_ in CONFIG_KEYS.items() if get(key) is not None}
        try:
            extraction = Extraction.from_dict(given, "align", "the run's align config")
            return cls.of(layer, head, mode, n_layers, n_heads, extraction)
        except UserError as err:
            raise UserError(f"align.layer={layer} / align.head={head}: {err}") from None

    @property
    def shift(self) -> bool:
        return self.mode == "shift"

    @property
    def full_context(self) -> bool:
        return self.mode == "full"

    @property
    def where(self) -> tuple[int, int | None, str]:
        """Which rows are read, whatever the extraction: (layer, head, mode)."""
        return self.layer, self.head, self.mode

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


def record_folder(run_dir: Path) -> Path:
    """Where a run's records are kept: ``RUN_DIR/align`` of a run directory or of any of its
    checkpoints."""
    return run_folder(run_dir) / "align"


@dataclass(frozen=True)
class ReadingRecord:
    """A reading chosen on development data, as ``scripts/align.py --tune-on`` records it:
    the reading, the set it was tuned on, every value tried, and for a merged pair the reverse
    run's head (read by the same extraction, on the merged matrices)."""

    reading: HeadReading
    tuned_on: str
    trials: list[Trial] = field(default_factory=list, compare=False)
    reverse: HeadReading | None = None

    def save(self, folder: Path, name: str = READING_RECORD) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        record = {
            "reading": self.reading.to_dict(),
            "reverse": None if self.reverse is None else self.reverse.to_dict(),
            "tuned_on": self.tuned_on,
            "trials": [vars(t) for t in self.trials],
        }
        path = folder / name
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, run_dir: Path, name: str = READING_RECORD) -> ReadingRecord | None:
        """A run's record (of its directory or any of its checkpoints); None if it has none.
        A record of an older ``scripts/align.py`` is a UserError that says how to re-tune."""
        folder = record_folder(run_dir)
        path = folder / name
        if not path.is_file():
            old = [f for f in OLD_RECORDS if (folder / f).is_file()]
            if old:
                raise UserError(
                    f"{folder / old[0]} was written by an older scripts/align.py (a reading is "
                    f"now one record, every parameter tuned on development data): tune again "
                    f"with {RETUNE.format(run=run_folder(run_dir))}, then delete {old[0]}"
                )
            return None
        saved = json.loads(path.read_text(encoding="utf-8"))
        source = f"tuned on {saved.get('tuned_on', '?')}"
        reading = HeadReading.from_dict(saved.get("reading", {}), str(path), source)
        reverse = saved.get("reverse")
        if reverse is not None:
            reverse = HeadReading.from_dict(reverse, str(path), source)
        trials = [Trial(**t) for t in saved.get("trials", [])]
        return cls(reading, saved.get("tuned_on", ""), trials, reverse)


def guided_reading(run_dir: Path, n_layers: int, n_heads: int) -> HeadReading | None:
    """The head a run trained with ``align.guided``, read as its config says (its
    ``config.yaml``); None for a run without guidance."""
    if not (run_folder(run_dir) / "config.yaml").is_file():
        return None
    align = load_run_config(run_dir).get("align")
    if align is None or not align.get("guided", False):
        return None
    return HeadReading.from_config(align, n_layers, n_heads)


def with_tuned(reading: HeadReading, run_dir: Path | None) -> HeadReading:
    """``reading`` by the run's tuned parameters if it is the head they were tuned for, else as
    it is: a tau chosen for one head is never applied to another."""
    if run_dir is None:
        return reading
    record = ReadingRecord.load(run_dir)
    if record is None or record.reading.where != reading.where:
        return reading
    return record.reading


def tuned_pair(
    run_dir: Path, forward: HeadReading, reverse: HeadReading, named: bool
) -> tuple[HeadReading, HeadReading, Extraction | None]:
    """The heads a pair merges and the reading tuned for them (``with_tuned`` for a pair).

    The run's merged record (``MERGED_RECORD``) gives both heads unless heads were ``named``;
    its extraction applies only to the two heads it was tuned for, else None: nothing was tuned
    for this pair of heads.
    """
    record = ReadingRecord.load(run_dir, MERGED_RECORD)
    if record is None or record.reverse is None:
        return forward, reverse, None
    if not named:
        forward, reverse = record.reading, record.reverse
    if (forward.where, reverse.where) != (record.reading.where, record.reverse.where):
        return forward, reverse, None
    return forward, reverse, record.reading.extraction


def default_reading(run_dir: Path | None, n_layers: int, n_heads: int) -> HeadReading:
    """The reading every command uses unless told: the run's tuned reading, else its guided
    head as configured, else the last layer's heads averaged by argmax."""
    if run_dir is None:
        return HeadReading(n_layers, None)
    record = ReadingRecord.load(run_dir)
    if record is not None:
        return record.reading
    guided = guided_reading(run_dir, n_layers, n_heads)
    return guided if guided is not None else HeadReading(n_layers, None)


def parse_head(
    text: str | None,
    n_layers: int,
    n_heads: int,
    run_dir: Path | None = None,
    mode: str | None = None,
    method: str | None = None,
    tau: float | None = None,
    diagonal: float | None = None,
    alike: float | None = None,
) -> HeadReading:
    """``--head`` (with ``--mode``, ``--method``, ``--tau``, ``--diagonal`` and
    ``--no-alike``) of every command line -> a ``HeadReading``.

    ``L:H`` is a head, ``L`` a layer's heads averaged (1-based; negative from the end), read
    in ``mode`` (default causal); ``best`` is the reading ``--tune-on`` recorded for the run,
    ``guided`` the head the run trained with ``align.guided``; None is ``default_reading``.
    A head is read by the run's tuned parameters when it is the tuned head (``with_tuned``);
    ``method`` / ``tau`` / ``diagonal`` / ``alike`` replace what they name.
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
    reading = with_tuned(reading, run_dir)
    return reading.read_by(reading.extraction.overridden(method, tau, diagonal, alike))


def named_reading(text: str | None, n_layers: int, n_heads: int, run_dir: Path) -> HeadReading:
    """``--head best``, ``--head guided`` or no ``--head`` at all, looked up in the run."""
    if text is None:
        return default_reading(run_dir, n_layers, n_heads)
    if text == "best":
        record = ReadingRecord.load(run_dir)
        if record is None:
            raise UserError(
                f"--head best: {record_folder(run_dir) / READING_RECORD} does not exist: choose "
                f"a head on development data first ({RETUNE.format(run=run_folder(run_dir))}), "
                f"or name the head as L:H"
            )
        return record.reading
    reading = guided_reading(run_dir, n_layers, n_heads)
    if reading is None:
        raise UserError(
            f"--head guided: {run_folder(run_dir)} was not trained with align.guided=true "
            f"(its config.yaml says so); name a head as L:H, or best after scripts/align.py "
            f"--tune-on"
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
