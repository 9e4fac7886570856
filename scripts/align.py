"""Word alignments from a trained model's cross-attention, scored against gold.

    python scripts/align.py RUN --src es.txt --tgt en.txt --gold gold.wa --output es-en.align
    # the best alignments: a head and its reading chosen on development data, then merged with
    # a reverse run (export TRANSFORMER_MT_DATA=... for the shared development sets)
    python scripts/align.py RUN --tune-on xlwa_dev --tune-on epps_dev
    python scripts/align.py RUN --reverse-run RUN_EN_ES --tune-on xlwa_dev --tune-on epps_dev
    python scripts/align.py RUN --reverse-run RUN_EN_ES --src es.txt --tgt en.txt --output both.align

It prints each decoder layer's AER / precision / recall (heads averaged, in each mode) with the
rows' entropy and uncovered source words; with gold, every head's AER, drawn to
``RUN/align/aer_heads.png`` (scored only: nothing is chosen on ``--gold``). ``--tune-on`` (one
or more development sets, their links summed) chooses the head (the guided one, else the best
on them) and every parameter of its reading (tau, the diagonal prior and its narrowing and
anchoring past a length, words spelled alike), printing each value tried, and records it in
``RUN/align/reading.json``; ``--diagonal`` / ``--no-alike`` keep those fixed. ``--output``
writes Pharaoh links (0-based ``source-target``) of ``--head`` (default: the tuned reading,
else the guided head, else the last layer's mean by argmax). ``--reverse-run``: a model trained
the other way; the two heads' matrices merged by their geometric mean, read by the pair's own
tuned reading (``RUN/align/reading_merged.json``). Without ``--src``, a demo run aligns its
own test pairs against the generator's gold.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from transformer_mt.align.extract import EXTRACTIONS, Extraction
from transformer_mt.align.links import format_pharaoh
from transformer_mt.align.reading import MODES, tuned_pair
from transformer_mt.analysis.pipeline import (
    Aligner,
    Row,
    demo_pairs,
    dev_sets,
    every_method,
    file_pairs,
    format_grid,
    format_layers,
    format_rows,
    format_trials,
    merge_pair,
    scan_heads,
    scan_layers,
    tune_run,
)
from transformer_mt.cli import ArgumentParser, add_reading_overrides, report_user_errors
from transformer_mt.errors import UserError
from transformer_mt.run_config import refuse_removed
from transformer_mt.viz.alignment import plot_aer_grid


def parse_args() -> argparse.Namespace:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir", type=Path, help="a run directory of train.py, or a .ckpt")
    parser.add_argument("--src", type=Path, help="source sentences, one per line")
    parser.add_argument("--tgt", type=Path, help="their translations, one per line")
    parser.add_argument("--gold", type=Path, help="gold alignments: Pharaoh/talp lines or NAACL")
    parser.add_argument("--one-indexed", action="store_true", help="the gold counts words from 1")
    parser.add_argument("--reverse-gold", action="store_true", help="links are target-source")
    parser.add_argument("--split", default="test", choices=["train", "valid", "test"])
    parser.add_argument("--limit", type=int, default=500, help="demo pairs to align")
    parser.add_argument(
        "--head", help="L:H, L (heads averaged; negative from the end), best or guided"
    )
    parser.add_argument("--mode", choices=MODES, help="the rows of L:H or L (default causal)")
    parser.add_argument("--method", choices=EXTRACTIONS, help="how weights become links")
    parser.add_argument("--tau", type=float, help="grow-diag's tau (default: the run's tuned one)")
    add_reading_overrides(parser)
    parser.add_argument(
        "--tune-on",
        action="append",
        metavar="SET",
        help="a development gold set: xlwa_dev, epps_dev (under TRANSFORMER_MT_DATA), "
        "xlwa:FILE or graca:DIR; repeat to combine (their links summed)",
    )
    parser.add_argument("--reverse-run", type=Path, help="a run trained the other way, merged in")
    parser.add_argument("--output", type=Path, help="write the links here, Pharaoh format")
    parser.add_argument("--average-last", type=int, default=1, help="average N checkpoints")
    refuse_removed(sys.argv[1:], flags=True)
    args = parser.parse_args()
    if (args.src is None) != (args.tgt is None):
        parser.error("--src and --tgt go together")
    if args.gold is not None and args.src is None:
        parser.error("--gold scores --src / --tgt: pass them too")
    return args


def fixed_parameters(args: argparse.Namespace) -> dict[str, float]:
    """The reading parameters the command line gives, which ``--tune-on`` keeps as they are."""
    fixed = {"diagonal": args.diagonal, "alike": args.alike, "tau": args.tau}
    return {name: float(value) for name, value in fixed.items() if value is not None}


@report_user_errors
def main() -> None:
    args = parse_args()
    Extraction().overridden(args.method, args.tau, args.diagonal)  # named before any work
    if args.tune_on is not None and args.method == "argmax":
        raise UserError("--tune-on tunes grow-diag's parameters: leave out --method argmax")
    run = Aligner(args.run_dir, args.average_last)
    pair = None
    if args.reverse_run is not None:
        reverse = Aligner(args.reverse_run, args.average_last)
        if not run.reverse_of(reverse):
            raise UserError(f"--reverse-run {args.reverse_run} translates as {args.run_dir} does")
        pair = reverse, reverse.reading(args.head, args.mode)
    if args.tune_on is not None:
        data_dir = os.environ.get("TRANSFORMER_MT_DATA")
        dev, dropped = dev_sets(args.tune_on, run.direction, data_dir).foldable(run.tokenizer)
        # the head to tune: the one named, else the guided head, else the best on the dev set
        head = run.reading(args.head, args.mode) if args.head or run.guided else None
        record, what = tune_run(run, dev, head, pair, fixed_parameters(args))
        print(f"tuning on {dev.name} ({len(dev)} pairs, {dropped} left out), {what}:")
        print("  development AER of each value tried:")
        print(format_trials(record.trials))
        print(f"  chosen {record.reading.label}, recorded in {run.records}")
        if args.src is None:
            return  # tuning alone
    if args.src is None:
        pairs = demo_pairs(args.run_dir, args.split, args.limit)
    else:
        files = args.src, args.tgt, args.gold, args.one_indexed, args.reverse_gold
        pairs = file_pairs(*files, run.direction)
    gold = pairs.gold
    print(f"{pairs.name}; model {', '.join(p.name for p in run.checkpoints)}; heads averaged")
    attention = run.capture(pairs)
    print(format_layers(scan_layers(attention, gold)))
    if gold is not None:
        scan = scan_heads(attention, gold)
        best = scan.best
        grid = scan.grids[best.reading.mode]
        print(f"\nAER per head ({best.reading.mode}; the last column is the layer's mean):")
        print(format_grid(grid))
        title = f"AER per head, {best.reading.mode}: {pairs.name}"
        figure = plot_aer_grid([[s.aer for s in row] for row in grid], title)
        run.records.mkdir(parents=True, exist_ok=True)
        figure.savefig(run.records / "aer_heads.png", dpi=120)
        print(
            f"lowest on this gold: {best.reading.name}, AER {best.aer:.3f} (scored only; "
            f"--tune-on chooses a head on development data)"
        )
    reading = run.reading(args.head, args.mode, args.method, args.tau, args.diagonal, args.alike)
    links = attention.links(reading)
    print(
        f"\nlinks of {reading.label}"
        + f" ({reading.extraction.source})" * bool(reading.extraction.source)
    )
    rows = (
        []
        if gold is None
        else [Row.of(r.label, attention.links(r), gold) for r in every_method(reading)]
    )
    if pair is not None:
        # the heads the pair was tuned for, read as tuned, unless --head or --mode names others
        named = args.head is not None or args.mode is not None
        ours, reverse_head, tuned = tuned_pair(args.run_dir, reading, pair[1], named)
        pair = pair[0], reverse_head
        base = Extraction("grow-diag") if tuned is None else tuned
        how = base.overridden(args.method, args.tau, args.diagonal, args.alike)
        if tuned is None:
            print(f"note: no reading tuned for these heads: {how.name} (tune it with --tune-on)")
        links, theirs = merge_pair(attention, ours, pair, how)
        print(f"merged with {pair[1].name} of {args.reverse_run} by their geometric mean, read")
        print(f"  by {how.name} {how.source}".rstrip())
        if gold is not None:
            rows += [Row.of(f"reverse: {pair[1].label}", theirs, gold)]
            rows += [Row.of(f"merged, {how.name}", links, gold)]
    if rows:
        print(format_rows(rows, pairs))
    if args.output is not None:
        args.output.write_text("".join(format_pharaoh(ls) + "\n" for ls in links), encoding="utf-8")
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
