"""Word alignments from a trained model's cross-attention, scored against gold.

    python scripts/align.py RUN --src es.txt --tgt en.txt --gold gold.wa --output es-en.align
    # the best alignments: a reverse run merged in, tau tuned on a dev set first
    python scripts/align.py RUN --reverse-run RUN_EN_ES --tune-on xlwa:dev.tsv
    python scripts/align.py RUN --reverse-run RUN_EN_ES --src es.txt --tgt en.txt --output both.align

It prints each decoder layer's AER / precision / recall (heads averaged, in each mode) with the
rows' entropy and uncovered source words; with gold, every head's AER, drawn to
``RUN/align/aer_heads.png``, the best recorded in ``RUN/align/best_head.json``. ``--output``
writes Pharaoh links (0-based ``source-target``) of ``--head`` (default: the guided head, else
the best recorded, else the last layer's mean) read by ``--method`` (default: grow-diag at the
tau ``--tune-on`` recorded, with the diagonal prior and words spelled alike linked, else
argmax). ``--reverse-run``: a model trained the other way; the two heads' matrices merged by
their geometric mean, read by grow-diag at the pair's tuned tau, the same way. Without
``--src``, a demo run aligns its own test pairs against the generator's gold.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transformer_mt.align.extract import EXTRACTIONS, MERGED_RECORD, Extraction
from transformer_mt.align.links import format_pharaoh
from transformer_mt.align.reading import MODES
from transformer_mt.analysis.pipeline import (
    Aligner,
    Row,
    demo_pairs,
    dev_set,
    every_method,
    file_pairs,
    format_grid,
    format_layers,
    format_rows,
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
        "--tune-on", metavar="FORMAT:PATH", help="a dev set, xlwa:FILE or graca:DIR"
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


@report_user_errors
def main() -> None:
    args = parse_args()
    Extraction.for_run(args.method, args.tau, diagonal=args.diagonal)  # named before any work
    run = Aligner(args.run_dir, args.average_last)
    pair = None
    if args.reverse_run is not None:
        reverse = Aligner(args.reverse_run, args.average_last)
        if not run.reverse_of(reverse):
            raise UserError(f"--reverse-run {args.reverse_run} translates as {args.run_dir} does")
        pair = reverse, reverse.reading(args.head, args.mode)
    if args.tune_on is not None:
        dev, dropped = dev_set(args.tune_on, run.direction).foldable(run.tokenizer)
        chosen, table, what = tune_run(run, dev, run.reading(args.head, args.mode), pair)
        print(f"tuning on {args.tune_on} ({len(dev)} pairs, {dropped} left out), {what}:")
        scores = "  ".join(f"{t:g}: {a:.3f}" for t, _, a, _, _ in table)
        read_as = f"diagonal {chosen.diagonal:g}" + ", alike" * chosen.alike
        print(f"  grow-diag AER by tau ({read_as}): {scores}")
        print(f"  chosen {chosen.name}, recorded in {run.records}")
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
        best = scan.record(run.records, pairs.name)
        grid = scan.grids[best.reading.mode]
        print(f"\nAER per head ({best.reading.mode}; the last column is the layer's mean):")
        print(format_grid(grid))
        title = f"AER per head, {best.reading.mode}: {pairs.name}"
        figure = plot_aer_grid([[s.aer for s in row] for row in grid], title)
        figure.savefig(run.records / "aer_heads.png", dpi=120)
        print(f"best head: {best.reading.name}, AER {best.aer:.3f}, recorded in {run.records}")
    reading = run.reading(args.head, args.mode, args.method, args.tau, args.diagonal, args.alike)
    links = attention.links(reading)
    print(
        f"\nlinks of {reading.label}"
        + f" ({reading.extraction.source})" * bool(reading.extraction.source)
    )
    rows = (
        []
        if gold is None
        else [Row.of(r.label, attention.links(r), gold) for r in every_method(reading, run.records)]
    )
    if pair is not None:
        how = Extraction.for_run(
            args.method or "grow-diag",
            args.tau,
            run.records,
            MERGED_RECORD,
            args.diagonal,
            args.alike,
        )
        if not how.source.startswith("tuned"):
            print(f"note: no tau tuned for the pair: {how.name} (tune it with --tune-on)")
        links, theirs = merge_pair(attention, reading, pair, how)
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
