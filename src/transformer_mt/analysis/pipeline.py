"""The alignment pipeline that ``scripts/align.py``, ``benchmarks/alignment_aer.py``, validation
AER and the explorer share, in stages a reader can name:

1. **capture**: ``Aligner`` (one trained run) captures a set of pairs' word-level
   cross-attention as ``CorpusAttention``, teacher-forced on the given targets;
2. **read**: a ``HeadReading`` turns it into matrices and links; ``scan_heads`` scores every
   head in every mode against gold and names the best;
3. **tune**: a head (the guided one, else the best) and every parameter of its reading,
   chosen on development sets' matrices (``align.extract.tune``) and recorded for the run
   (``ReadingRecord``);
4. **combine directions**: a reverse run's matrices turned round and merged with the forward
   run's by their geometric mean (``merged``);
5. **score**: ``Row``, a label with links and their AER, precision and recall;
6. **report**: ``format_rows``, ``format_layers``, ``format_grid``, ``format_by_length``.

Each stage returns records, never display strings that a later stage parses back.

Legend: L layers, H heads, W_tgt target words, W_src source words.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from torch import Tensor

from transformer_mt.align.extract import (
    EXTRACTIONS,
    Extraction,
    Trial,
    merge_directions,
    teacher_rows,
    tune,
)
from transformer_mt.align.gold import (
    DEV_SETS,
    SHARED_GOLD_SETS,
    GoldSet,
    combined,
    load_gold_set,
    read_sentences,
    shared_gold_set,
)
from transformer_mt.align.links import (
    Gold,
    Links,
    corpus_scores,
    read_pharaoh,
    scores_by_length,
    turned_round,
)
from transformer_mt.align.reading import (
    MERGED_RECORD,
    MODES,
    READING_RECORD,
    HeadReading,
    ReadingRecord,
    guided_reading,
    parse_head,
    record_folder,
)
from transformer_mt.analysis.alignment import (
    LAYER_MEAN,
    LayerScores,
    corpus_attention,
    score_heads,
    score_layers,
)
from transformer_mt.checkpoint import load_model, run_data_config
from transformer_mt.config import GoldSetConfig
from transformer_mt.data.sources import demo_files
from transformer_mt.errors import UserError
from transformer_mt.run_config import run_folder


@dataclass
class CorpusAttention:
    """Word-level cross-attention of a set of pairs: per pair (L, H, W_tgt + 1, W_src + 1), EOS
    last on both axes; the full-context capture (``full`` mode) is made when first read."""

    pairs: GoldSet
    causal: list[Tensor]  # as the model predicts: row t sees the target before t
    capture_full: Callable[[], list[Tensor]] = field(repr=False)
    _full: list[Tensor] | None = field(default=None, repr=False)

    def words(self, mode: str) -> list[Tensor]:
        """The capture a mode reads: causal and shift the model's own, full the full-context one."""
        if mode != "full":
            return self.causal
        if self._full is None:
            self._full = self.capture_full()
        return self._full

    def matrices(self, reading: HeadReading) -> list[Tensor]:
        """Per pair, ``reading``'s (W_tgt, W_src) matrix, the EOS row and column left out."""
        return [reading.matrix(w) for w in self.words(reading.mode)]

    def links(self, reading: HeadReading) -> list[Links]:
        captured = self.words(reading.mode)
        return [reading.links(w, pair) for w, pair in zip(captured, self.pairs.words, strict=True)]


class Aligner:
    """One trained run, loaded for aligning: its model, tokenizer, languages and records."""

    def __init__(self, run_dir: Path, average_last: int = 1) -> None:
        self.run_dir = Path(run_dir)
        self.model, self.tokenizer, self.checkpoints = load_model(
            run_dir, average_last=average_last
        )
        self.data = run_data_config(run_folder(run_dir))
        self.records = record_folder(run_dir)  # RUN/align, of a run or any of its checkpoints

    @property
    def direction(self) -> tuple[str, str]:
        return self.data.src_lang, self.data.tgt_lang

    @property
    def guided(self) -> HeadReading | None:
        """The head the run trained with ``align.guided``, read as trained; None without."""
        return guided_reading(self.run_dir, self.model.cfg.n_layers, self.model.cfg.n_heads)

    def reading(
        self,
        head: str | None = None,
        mode: str | None = None,
        method: str | None = None,
        tau: float | None = None,
        diagonal: float | None = None,
        alike: float | None = None,
    ) -> HeadReading:
        """``--head`` / ``--mode`` / ``--method`` / ``--tau`` / ``--diagonal`` /
        ``--no-alike`` resolved here."""
        cfg = self.model.cfg
        return parse_head(
            head, cfg.n_layers, cfg.n_heads, self.run_dir, mode, method, tau, diagonal, alike
        )

    def capture(self, pairs: GoldSet, progress: bool = True) -> CorpusAttention:
        """Stage 1: the pairs' word-level cross-attention; text whose pieces do not fold
        into its words is a UserError naming the line."""

        def attend(full: bool) -> list[Tensor]:
            try:
                return corpus_attention(
                    self.model, self.tokenizer, pairs.sources, pairs.targets, progress, full
                )
            except ValueError as err:
                raise UserError(f"{pairs.name}: {err}") from None

        return CorpusAttention(pairs, attend(False), lambda: attend(True))

    def reverse_of(self, other: Aligner) -> bool:
        """Whether ``other`` translates this run's direction turned round (False: the same
        direction); a run of another language pair is a UserError."""
        ours, theirs = self.direction, other.direction
        if theirs == ours:
            return False
        if theirs == ours[::-1]:
            return True
        raise UserError(
            f"{other.run_dir} translates {theirs[0]}->{theirs[1]}; {self.run_dir} translates "
            f"{ours[0]}->{ours[1]}: it must translate the same way or {ours[1]}->{ours[0]}"
        )


def turned(matrices: list[Tensor]) -> list[Tensor]:
    """A reverse run's (W_src, W_tgt) matrices in the forward run's (W_tgt, W_src) orientation."""
    return [m.T for m in matrices]


def merged(forward: list[Tensor], backward: list[Tensor]) -> list[Tensor]:
    """Stage 4: each pair's forward matrix and turned-round reverse matrix, merged by their
    geometric mean (``merge_directions``)."""
    return [merge_directions(f, b) for f, b in zip(forward, backward, strict=True)]


def every_method(reading: HeadReading) -> list[HeadReading]:
    """``reading``, then its head read by every other method, its other parameters kept."""
    others = [m for m in EXTRACTIONS if m != reading.extraction.method]
    return [reading, *(reading.read_by(reading.extraction.overridden(m)) for m in others)]


def teacher_matrices(links: list[Links], pairs: GoldSet) -> list[Tensor]:
    """An aligner's links of the pairs as the rows a perfectly fitted head would have
    (``teacher_rows``): read back, the ceiling of a head that copied its teacher."""
    return [
        teacher_rows(ls, len(t.split()), len(s.split()))
        for ls, s, t in zip(links, pairs.sources, pairs.targets, strict=True)
    ]


def read(matrices: list[Tensor], extraction: Extraction, pairs: GoldSet) -> list[Links]:
    """``extraction``'s links of the pairs' (W_tgt, W_src) ``matrices``."""
    return [extraction.links(m, w) for m, w in zip(matrices, pairs.words, strict=True)]


def dev_sets(names: list[str], direction: tuple[str, str], data_dir: Path | None) -> GoldSet:
    """``--tune-on`` (repeatable): the shared development sets by name (``DEV_SETS``, under
    ``data_dir``) or ``xlwa:FILE.tsv`` / ``graca:FOLDER``, in the run's direction, as one set
    (``combined``: their links summed). A shared test set is refused."""
    for text in names:  # every name checked before any set is read
        if text in SHARED_GOLD_SETS and text not in DEV_SETS:
            raise UserError(
                f"--tune-on {text}: a test set, scored only; tune on {' and '.join(DEV_SETS)}"
            )
    sets = []
    for text in names:
        if text in DEV_SETS:
            if data_dir is None:
                raise UserError(
                    f"--tune-on {text}: set TRANSFORMER_MT_DATA to the folder of the gold sets"
                )
            sets.append(shared_gold_set(text, Path(data_dir), *direction))
            continue
        fmt, sep, path = text.partition(":")
        if not sep or fmt not in ("xlwa", "graca") or not path:
            raise UserError(
                f"--tune-on {text!r}: expected {', '.join(DEV_SETS)}, xlwa:FILE.tsv or "
                f"graca:FOLDER (a development gold set; never the test set you report)"
            )
        spec = GoldSetConfig(format=fmt, path=path)
        sets.append(load_gold_set(text, spec, *direction, where=f"--tune-on {text}"))
    return combined(sets)


def tune_run(
    run: Aligner,
    dev: GoldSet,
    reading: HeadReading | None,
    pair: tuple[Aligner, HeadReading] | None = None,
    fixed: dict[str, float] | None = None,
) -> tuple[ReadingRecord, str]:
    """Stage 3: a reading chosen on a development set and recorded for the run, where every
    command finds it (``MERGED_RECORD`` for a pair merged with a reverse run's head).

    Args:
        reading: the head to tune (its extraction is replaced); None: the best head in any
            mode on the development set, read by argmax, then tuned.
        pair: a reverse run and its head, merged in before tuning.
        fixed: reading parameters given on the command line, kept as they are.

    Returns:
        the record and what was tuned, in words.
    """
    attention = run.capture(dev)
    if reading is None:
        reading = scan_heads(attention, dev.gold).best.reading
    matrices, what = attention.matrices(reading), reading.name
    if pair is not None:
        reverse, theirs = pair
        matrices = merged(matrices, reverse_matrices(reverse, dev, theirs))
        what = f"{reading.name}, merged with {reverse.run_dir}'s {theirs.name}"
    chosen, trials = tune(matrices, dev.gold, dev.words, fixed)
    source = f"tuned on {dev.name}"
    record = ReadingRecord(
        reading.read_by(replace(chosen, source=source)),
        dev.name,
        trials,
        None if pair is None else pair[1].read_by(replace(chosen, source=source)),
    )
    record.save(run.records, MERGED_RECORD if pair is not None else READING_RECORD)
    return record, what


def format_trials(trials: list[Trial]) -> str:
    """``tune``'s trials, a line per parameter and pass: each value's development AER."""
    lines, key = [], None
    for t in trials:
        if (t.parameter, t.round) != key:
            key = (t.parameter, t.round)
            lines.append(f"  pass {t.round}, {t.parameter}:")
        lines[-1] += f"  {t.value:g}: {t.aer:.3f}"
    return "\n".join(lines)


def merge_pair(
    forward: CorpusAttention,
    reading: HeadReading,
    pair: tuple[Aligner, HeadReading],
    how: Extraction,
) -> tuple[list[Links], list[Links]]:
    """Stage 4 on captured pairs: a reverse run's head (``pair``) on the pairs turned round,
    merged with ``reading``'s matrices and read by ``how``. Returns the merged links and the
    reverse head's own links, turned into the forward direction."""
    reverse, theirs = pair
    backward = reverse_matrices(reverse, forward.pairs, theirs)
    links = read(merged(forward.matrices(reading), backward), how, forward.pairs)
    turned_pairs = forward.pairs.reversed().words
    own = [turned_round(theirs.extraction.links(b.T, w)) for b, w in zip(backward, turned_pairs)]
    return links, own


@dataclass(frozen=True)
class Row:
    """Stage 5: one aligner's links on a gold set and their scores."""

    label: str
    links: list[Links]
    aer: float
    precision: float
    recall: float

    @classmethod
    def of(cls, label: str, links: list[Links], gold: Gold) -> Row:
        return cls(label, links, *corpus_scores(links, gold))

    @classmethod
    def scored(cls, label: str, scores: LayerScores) -> Row:
        return cls(label, scores.links, scores.aer, scores.precision, scores.recall)


@dataclass
class HeadScan:
    """Every head alone and every layer's mean, in every mode, scored against a gold set."""

    grids: dict[str, list[list[LayerScores]]]  # mode -> layer -> H heads and the mean

    @property
    def best(self) -> LayerScores:
        """The lowest AER of any head or layer mean in any mode (its ``reading`` by argmax)."""
        return min((s for grid in self.grids.values() for row in grid for s in row), key=_aer)

    def best_of(self, mode: str, heads: bool = True) -> LayerScores:
        """The best single head (``heads``) or layer mean of one mode."""
        cells = [s for row in self.grids[mode] for s in (row[:-1] if heads else row[-1:])]
        return min(cells, key=_aer)

    def cell(self, reading: HeadReading) -> LayerScores:
        row = self.grids[reading.mode][reading.layer - 1]
        return row[-1] if reading.head is None else row[reading.head - 1]


def _aer(scores: LayerScores) -> float:
    return scores.aer


def scan_heads(attention: CorpusAttention, gold: Gold) -> HeadScan:
    """Stage 2 against gold: every head and layer mean in every mode, read by argmax."""
    return HeadScan({mode: score_heads(attention.words(mode), gold, mode) for mode in MODES})


def scan_layers(attention: CorpusAttention, gold: Gold | None) -> dict[str, list[LayerScores]]:
    """Every layer's heads averaged, in every mode (argmax; with diagnostics)."""
    return {
        mode: score_layers(attention.words(mode), gold, replace(LAYER_MEAN, mode=mode))
        for mode in MODES
    }


def reverse_matrices(reverse: Aligner, pairs: GoldSet, reading: HeadReading) -> list[Tensor]:
    """A reverse run's ``reading`` on the pairs turned round, its matrices turned back into the
    forward run's (W_tgt, W_src) orientation: ready for ``merged``."""
    return turned(reverse.capture(pairs.reversed()).matrices(reading))


def file_pairs(
    src: Path,
    tgt: Path,
    gold: Path | None,
    one_indexed: bool,
    reverse: bool,
    direction: tuple[str, str],
) -> GoldSet:
    """Parallel files (and a Pharaoh / NAACL gold file) as pairs; lines that disagree in number
    are a UserError, gold links outside their sentences are left out with a warning."""
    sources, targets = read_sentences(src), read_sentences(tgt)
    if len(sources) != len(targets):
        raise UserError(f"{src} has {len(sources)} lines but {tgt} has {len(targets)}")
    name = f"{len(sources)} pairs of {src} / {tgt}"
    if gold is None:
        return GoldSet(name, sources, targets, None)
    spec = GoldSetConfig(
        format="pharaoh",
        path=str(gold),
        src=str(src),
        tgt=str(tgt),
        reverse=reverse,
        one_indexed=one_indexed,
    )
    return replace(load_gold_set(name, spec, *direction, where="--gold"), name=name)


def demo_pairs(run_dir: Path, split: str, limit: int) -> GoldSet:
    """The first ``limit`` pairs of a demo run's split with the generator's gold alignments."""
    data = run_data_config(run_folder(run_dir))
    if data.source != "demo":
        raise UserError(
            f"{run_dir} was trained on data={data.name}: pass --src and --tgt (and --gold) "
            f"files; gold alignments are built in for the demo corpus only"
        )
    with open(demo_files(data)[split], encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(limit), f)]
    gold = [read_pharaoh(r["alignment"]) for r in rows]
    name = f"{len(rows)} {split} pairs of the demo corpus"
    return GoldSet(name, [r["src"] for r in rows], [r["tgt"] for r in rows], gold)


def format_rows(rows: list[Row], pairs: GoldSet | None = None, width: int = 44) -> str:
    """Stage 6: one line per row, AER / P / R, and by source length when ``pairs`` is given."""
    lines = [f"{'':<{width}} {'AER':>6} {'P':>6} {'R':>6}" + ("  by source length" * bool(pairs))]
    for row in rows:
        line = f"{row.label:<{width}} {row.aer:6.3f} {row.precision:6.3f} {row.recall:6.3f}"
        if pairs is not None:
            line += "  " + format_by_length(row.links, pairs)
        lines.append(line)
    return "\n".join(lines)


def format_layers(rows: dict[str, list[LayerScores]]) -> str:
    """Per layer: AER/P/R of each mode (with gold), entropy against log(n), coverage."""
    plain = rows["causal"]
    scored = plain[0].aer is not None
    head = "layer"
    if scored:
        head += "  " + "  ".join(f"{mode + ' AER/P/R':<20}" for mode in rows)
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


def format_by_length(links: list[Links], pairs: GoldSet, minus: list[Links] | None = None) -> str:
    """AER (sentences) per source-length bucket, as ``1-10: 0.123 (40)  11-20: ...``; with
    ``minus`` (another aligner's links on the same pairs) the difference to its AER in each
    bucket, signed: where a gap between the two lives."""
    lengths = [len(s.split()) for s in pairs.sources]
    buckets = scores_by_length(links, pairs.gold, lengths)
    if minus is None:
        return "  ".join(f"{name}: {aer:.3f} ({n})" for name, (aer, _, _, n) in buckets.items())
    other = scores_by_length(minus, pairs.gold, lengths)
    return "  ".join(
        f"{name}: {aer - other[name][0]:+.3f} ({n})" for name, (aer, _, _, n) in buckets.items()
    )
