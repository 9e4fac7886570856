r"""AER of trained models' cross-attention next to eflomal, on the same text, in one run.

    export TRANSFORMER_MT_DATA=/path/to/data      # the folder of the gold sets (see docs/attention.md)
    python benchmarks/alignment_aer.py --run esen=RUN_ES_EN --run enes=RUN_EN_ES --gold graca xlwa \
        --by-length --tune-on xlwa_dev epps_dev
    python benchmarks/alignment_aer.py --run deen=RUN --gold bicici   # a German-English run
    python benchmarks/alignment_aer.py --run deen=RUN --gold-files test.de test.en gold.wa \
        --one-indexed --reverse-gold                # any other gold set, as files

It runs the pipeline of ``scripts/align.py`` (``transformer_mt.analysis.pipeline``) and adds
what is a benchmark's. Per gold set: eflomal both ways and their grow-diag-final-and, given the
first run's training pairs too (``--eflomal-tokenize moses``: a stronger baseline); per run its
guided head and last layer's mean, and with ``--tune-on`` the best head and best layer mean of
the development sets (test gold never chooses anything); every forward run merged with every
reverse run (geometric mean, grow-diag: the recipe); with ``--tune-on`` each head and the
merged pairs read by a reading chosen on the development sets (their links summed): grow-diag's
tau alone (the attention alone), and every parameter (``tune``: the prior, its narrowing and
anchoring, words spelled alike), each value's development AER printed; and the ceiling
(eflomal's links as rows, read back the same way). ``--by-length``: AER by source length, and
the merged pairs minus eflomal; ``--join-short K``: each set's short pairs alone and joined K
at a time (K 6-10: 60-100 words). Then each head against eflomal as the gold, each guided head
against its own training links, and with ``--agreement-on newstest2013`` every head and merged
pair against eflomal on that long news text (no gold), by source length.
"""

from __future__ import annotations

import os
import time
from argparse import Namespace, RawDescriptionHelpFormatter
from dataclasses import dataclass, field
from pathlib import Path
from string import punctuation as PUNCTUATION

import numpy as np
from machine import describe  # benchmarks/machine.py
from torch import Tensor

from transformer_mt.align.eflomal import EFLOMAL_TOKENIZE, align_beside
from transformer_mt.align.extract import Extraction, tune
from transformer_mt.align.gold import (
    DEV_SETS,
    SHARED_GOLD_SETS,
    GoldSet,
    GoldSetConfig,
    combined,
    load_gold_set,
    shared_gold_set,
)
from transformer_mt.align.links import Links, read_pharaoh, turned_round
from transformer_mt.align.reading import HeadReading
from transformer_mt.analysis.pipeline import (
    Aligner,
    Row,
    format_by_length,
    format_rows,
    format_trials,
    merged,
    read,
    scan_heads,
    teacher_matrices,
    turned,
)
from transformer_mt.cli import ArgumentParser, report_user_errors
from transformer_mt.data.sources import load_corpus

# real text without gold for --agreement-on: name -> (folder under --data-dir, file stem)
AGREEMENT_TEXTS = {"newstest2013": ("wmt13_newstest2013_esen", "newstest2013")}


@dataclass
class Run:
    """One ``--run``: the loaded run, whether it translates the first run's way turned round,
    and its heads' matrices on the development set (by reading)."""

    name: str
    aligner: Aligner
    reverse: bool
    dev_matrices: dict = field(default_factory=dict)

    def own(self, gold: GoldSet) -> GoldSet:
        """A gold set in this run's direction."""
        return gold.reversed() if self.reverse else gold

    def turn(self, links: list[Links]) -> list[Links]:
        """Links in this run's direction -> in the first run's."""
        return [turned_round(ls) for ls in links] if self.reverse else links

    def dev_scan(self, dev: GoldSet):
        """Every head and layer mean scored on the development set (captured once)."""
        if "scan" not in self.dev_matrices:
            attention = self.aligner.capture(self.own(dev), progress=False)
            self.dev_matrices["scan"] = scan_heads(attention, self.own(dev).gold)
        return self.dev_matrices["scan"]

    def on_dev(self, reading: HeadReading, dev: GoldSet) -> list[Tensor]:
        """``reading``'s matrices of the dev set in this run's direction (captured once)."""
        if reading not in self.dev_matrices:
            attention = self.aligner.capture(self.own(dev), progress=False)
            self.dev_matrices[reading] = attention.matrices(reading)
        return self.dev_matrices[reading]


def run_rows(run: Run, gold: GoldSet, dev: GoldSet | None, layers: bool = False):
    """A run's rows on a gold set, in the first run's direction: its guided head; the best head
    and best layer mean chosen on the development set (without one, the last layer's mean), or
    with ``layers`` every layer's mean; with a dev set, the head by the dev set's readings. And
    the matrices of the head it is compared by (the guided head, else the dev set's best)."""
    own = run.own(gold)
    attention = run.aligner.capture(own, progress=False)
    scan = scan_heads(attention, own.gold)
    rows, reading, which = [], None, ""
    if dev is not None:
        chosen = run.dev_scan(dev)
        best, mean = chosen.best.reading, chosen.best_of("causal", heads=False).reading
        reading, which = best, "best head on dev"
        rows.append(Row.scored(f"{run.name}: {which} {best.name}", scan.cell(best)))
        if not layers:
            rows.append(Row.scored(f"{run.name}: layer {mean.layer}, mean", scan.cell(mean)))
    last = [row[-1] for row in scan.grids["causal"]]
    rows += [Row.scored(f"{run.name}: layer {s.reading.layer}, mean", s) for s in last] * layers
    if dev is None and not layers:
        rows.append(Row.scored(f"{run.name}: layer {last[-1].reading.layer}, mean", last[-1]))
    if (guided := run.aligner.guided) is not None:
        reading, which = guided, "guided head"
        rows.append(Row.scored(f"{run.name}: guided head {guided.name}", scan.cell(guided)))
    if reading is None:
        reading = last[-1].reading
    matrices = attention.matrices(reading)
    if dev is not None:
        for chosen_reading, how, _ in tuned(run.on_dev(reading, dev), run.own(dev)):
            label = f"{run.name}: {which} by {chosen_reading.name} ({how})"
            rows.append(Row.of(label, read(matrices, chosen_reading, own), own.gold))
    rows = [Row(r.label, run.turn(r.links), r.aer, r.precision, r.recall) for r in rows]
    return rows, (turned(matrices) if run.reverse else matrices, reading)


def tuned(matrices: list[Tensor], dev: GoldSet) -> list[tuple[Extraction, str, list]]:
    """The dev set's reading of the attention alone (tau only), and with every parameter tuned
    (what ``scripts/align.py --tune-on`` records), each with its label and trials."""
    plain, plain_trials = tune(matrices, dev.gold, fixed={"diagonal": 0.0, "alike": 0.0})
    chosen, trials = tune(matrices, dev.gold, dev.words)
    return [(plain, "dev, attention alone", plain_trials), (chosen, "dev", trials)]


def merged_rows(runs: list[Run], heads: dict, gold: GoldSet, dev: GoldSet | None) -> list[Row]:
    """Every forward run merged with every reverse run (the recipe): geometric mean, read by
    grow-diag at the tau (and prior) of the dev set's merged matrices (without one: tau 0)."""
    rows = []
    for one in (r for r in runs if not r.reverse):
        for other in (r for r in runs if r.reverse):
            (ours, our_head), (theirs, their_head) = heads[one.name], heads[other.name]
            readings = [(Extraction("grow-diag"), "no dev set", [])]
            key = ("merged", other.name)  # tuned once per pair, whatever the gold set
            first = dev is not None and key not in one.dev_matrices
            if first:
                dev_theirs = turned(other.on_dev(their_head, dev))
                one.dev_matrices[key] = tuned(merged(one.on_dev(our_head, dev), dev_theirs), dev)
            if dev is not None:
                readings = one.dev_matrices[key]
            for chosen, how, trials in readings:
                links = read(merged(ours, theirs), chosen, gold)
                label = f"{one.name}+{other.name}: merged, {chosen.name} ({how})"
                rows.append(Row.of(label, links, gold.gold))
                if first and trials and how == "dev":
                    print(f"{label}: chosen on {dev.name}, development AER of each value tried:")
                    print(format_trials(trials))
    return rows


def ceiling_row(gdfa: list[Links], gold: GoldSet, dev: GoldSet, dev_gdfa: list[Links]) -> Row:
    """eflomal's links as the rows a perfectly fitted head would have, read back by grow-diag
    at the dev set's tau: how well a head that copied its teacher could do."""
    chosen = tune(teacher_matrices(dev_gdfa, dev), dev.gold)[0]
    links = read(teacher_matrices(gdfa, gold), chosen, gold)
    return Row.of(f"ceiling: eflomal gdfa as rows, {chosen.name}", links, gold.gold)


def score_gold(gold: GoldSet, runs: list[Run], args, train: dict, dev: GoldSet | None) -> None:
    """Every table of one gold set: eflomal, the runs, the merged pairs, the ceiling."""
    started = time.perf_counter()
    base = align_beside(gold.sources, gold.targets, **train)
    seconds = time.perf_counter() - started
    names = {
        "forward": "source->target",
        "reverse": "target->source",
        "gdfa": "grow-diag-final-and",
    }
    eflomal = [Row.of(f"eflomal {name}", base[k], gold.gold) for k, name in names.items()]
    heads, found, merges, ceiling = {}, [], [], []
    for run in runs:
        rows, heads[run.name] = run_rows(run, gold, dev)
        found += rows
    merges = merged_rows(runs, heads, gold, dev)
    if dev is not None:
        dev_gdfa = align_beside(dev.sources, dev.targets, **train)["gdfa"]
        ceiling = [ceiling_row(base["gdfa"], gold, dev, dev_gdfa)]
    cut = "words Moses-tokenized" if train["tokenize"] else "words as they are"
    print(f"\n{gold.name}: {len(gold)} pairs; eflomal given {len(train['train'][0]):,} training")
    print(f"pairs as well, {cut} ({seconds:.0f} s)")
    print(format_rows(eflomal + found + merges + ceiling, width=56))
    if args.by_length:
        print(f"\nAER by source length (words) on {gold.name}:")
        for row in eflomal[2:] + found + merges + ceiling:
            print(f"  {row.label}: {format_by_length(row.links, gold)}")
        for row in merges:
            print(f"  {row.label} minus eflomal: {format_by_length(row.links, gold, base['gdfa'])}")
    teacher = [(links, links) for links in base["gdfa"]]
    print(f"\nagainst eflomal grow-diag-final-and as if it were the gold, on {gold.name}:")
    print(format_rows([Row.of(r.label, r.links, teacher) for r in found + merges], width=56))


def agreement_on_text(runs: list[Run], args, train: dict, dev: GoldSet | None) -> None:
    """Long real text without gold (``--agreement-on``): eflomal aligns it beside the training
    pairs, and each head and merged pair is scored against eflomal's links as if they were gold,
    by source length: flat with length is what a head that reads long sentences well gives."""
    src_lang, tgt_lang = runs[0].aligner.direction
    folder, stem = AGREEMENT_TEXTS[args.agreement_on]
    texts = [
        (args.data_dir / folder / f"{stem}.{lang}").read_text().splitlines()
        for lang in (src_lang, tgt_lang)
    ]
    pairs = GoldSet(args.agreement_on, *texts, None)
    for run in runs:  # the pairs every run folds into its words, within its positions
        own, _ = run.own(pairs).foldable(
            run.aligner.tokenizer, run.aligner.model.cfg.max_positions - 2
        )
        pairs = run.own(own)
    gdfa = align_beside(pairs.sources, pairs.targets, **train)["gdfa"]
    as_gold = GoldSet(
        f"{args.agreement_on} (eflomal as gold)",
        pairs.sources,
        pairs.targets,
        [(ls, ls) for ls in gdfa],
    )
    rows, heads = [], {}
    for run in runs:
        found, heads[run.name] = run_rows(run, as_gold, dev, layers=True)
        rows += found
    merges = merged_rows(runs, heads, as_gold, dev)
    what = f"{len(pairs):,} pairs of {args.agreement_on}"
    print(f"\nagainst eflomal grow-diag-final-and on {what}, by source length:")
    for row in rows + merges:
        print(f"  {row.label}: {row.aer:.3f}  {format_by_length(row.links, as_gold)}")
    unseen = unseen_shares(as_gold.sources, train["train"][0])
    print("\nthe same by the share of source words no training source holds (length or words?):")
    for row in [r for r in rows if "guided" in r.label] + merges:
        for group, name in enumerate(UNSEEN_GROUPS):
            picked = np.flatnonzero(np.searchsorted(UNSEEN_EDGES, unseen) == group)
            part = as_gold.picked(picked, name)
            links = [row.links[n] for n in picked]
            print(f"  {row.label}, {name} ({len(picked)}): {format_by_length(links, part)}")


# groups by the share of a sentence's source words unseen in training: 0, (0, 0.1], over 0.1
UNSEEN_EDGES = (0.0, 0.1)
UNSEEN_GROUPS = ("no word unseen", "up to 10%", "over 10%")


def unseen_shares(sentences: list[str], training: list[str]) -> np.ndarray:
    """Per sentence, the share of its words (lowercased, punctuation stripped) that no
    training sentence holds."""

    def words(text: str) -> list[str]:
        return [w for w in (w.strip(PUNCTUATION).lower() for w in text.split()) if w]

    seen = {w for text in training for w in words(text)}
    return np.array([np.mean([w not in seen for w in words(s)] or [0.0]) for s in sentences])


def teacher_agreement(run: Run, n: int, seed: int = 0) -> Row | None:
    """A guided head against the links it was trained on, on ``n`` of its training pairs drawn
    at random (seeded): how well it fits its supervision at all; None without guidance."""
    guided, train = run.aligner.guided, load_corpus(run.aligner.data)["train"]
    if guided is None or "alignment" not in train.column_names:
        return None
    rows = sorted(np.random.default_rng(seed).choice(len(train), min(n, len(train)), replace=False))
    picked = train.select(rows)
    teacher = [(links, links) for links in (read_pharaoh(a)[0] for a in picked["alignment"])]
    pairs, _ = GoldSet("training pairs", picked["src"], picked["tgt"], teacher).foldable(
        run.aligner.tokenizer
    )
    links = run.aligner.capture(pairs, progress=False).links(guided)
    return Row.of(f"{run.name}: {len(pairs)} pairs", links, pairs.gold)


def gold_sets(args, src_lang: str, tgt_lang: str) -> list[GoldSet]:
    """``--gold`` sets (with ``--join-short``'s joined short pairs) and ``--gold-files``."""
    sets = []
    for name in args.gold:
        gold = shared_gold_set(name, args.data_dir, src_lang, tgt_lang)
        sets.append(gold)
        for k in [1, *args.join_short] if args.join_short else []:
            joined = gold.joined(k, args.short_words)
            sets += [joined] if len(joined) else []
    if args.gold_files:
        src, tgt, links = args.gold_files
        spec = GoldSetConfig("pharaoh", links, src, tgt, args.reverse_gold, args.one_indexed)
        sets.append(load_gold_set(Path(links).name, spec, src_lang, tgt_lang))
    return sets


def parse_args() -> Namespace:
    parser = ArgumentParser(description=__doc__, formatter_class=RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="append", required=True, help="NAME=RUN_DIR (repeatable)")
    parser.add_argument("--gold", nargs="*", default=[], choices=sorted(SHARED_GOLD_SETS))
    parser.add_argument("--gold-files", nargs=3, metavar=("SRC", "TGT", "LINKS"))
    parser.add_argument("--one-indexed", action="store_true")
    parser.add_argument("--reverse-gold", action="store_true")
    parser.add_argument("--data-dir", type=Path, default=os.environ.get("TRANSFORMER_MT_DATA"))
    parser.add_argument("--train-limit", type=int, default=1_000_000, help="eflomal's extra pairs")
    parser.add_argument("--eflomal-tokenize", choices=EFLOMAL_TOKENIZE, default="none")
    parser.add_argument("--by-length", action="store_true", help="AER by source length too")
    parser.add_argument("--join-short", type=int, nargs="+", metavar="K", default=[])
    parser.add_argument("--short-words", type=int, default=10, help="see --join-short")
    parser.add_argument(
        "--tune-on",
        nargs="+",
        choices=DEV_SETS,
        default=[],
        help="development gold sets (their links summed): every choice is made on them",
    )
    parser.add_argument("--teacher-pairs", type=int, default=400, help="0: no teacher rows")
    parser.add_argument(
        "--agreement-on", choices=sorted(AGREEMENT_TEXTS), help="long text, no gold"
    )
    args = parser.parse_args()
    if set(args.tune_on) & set(args.gold):
        parser.error(f"--tune-on {args.tune_on} and --gold {args.gold} share a set")
    if (args.gold or args.tune_on or args.agreement_on) and args.data_dir is None:
        parser.error("--gold, --tune-on and --agreement-on need --data-dir or TRANSFORMER_MT_DATA")
    return args


@report_user_errors
def main() -> None:
    args = parse_args()
    print(describe())
    runs = []
    for name, _, folder in (r.partition("=") for r in args.run):
        aligner = Aligner(Path(folder))
        runs.append(Run(name, aligner, runs[0].aligner.reverse_of(aligner) if runs else False))
    data = runs[0].aligner.data
    pairs = load_corpus(data)["train"][: args.train_limit]
    tokenize = (data.src_lang, data.tgt_lang) if args.eflomal_tokenize == "moses" else None
    train = {
        "train": (pairs["src"], pairs["tgt"]),
        "cache": Path(data.cache_dir),
        "tokenize": tokenize,
    }
    langs = data.src_lang, data.tgt_lang
    dev = (
        combined([shared_gold_set(name, args.data_dir, *langs) for name in args.tune_on])
        if args.tune_on
        else None
    )
    for gold in gold_sets(args, *langs):
        score_gold(gold, runs, args, train, dev)
    if args.agreement_on:
        agreement_on_text(runs, args, train, dev)
    if args.teacher_pairs:
        agreement = [teacher_agreement(run, args.teacher_pairs) for run in runs]
        print("\nguided heads against the links they were trained on (their training pairs):")
        print(format_rows([row for row in agreement if row is not None], width=56))


if __name__ == "__main__":
    main()
