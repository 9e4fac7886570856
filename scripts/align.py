"""Word alignments from a trained model's cross-attention, scored per decoder layer.

    # parallel files (one sentence per line, words separated by spaces) and a gold file
    python scripts/align.py RUN_DIR --src test.en --tgt test.de \\
        --gold de-en.wa --reverse-gold --output en-de.align

    # a demo run: its test pairs, scored against the generator's gold alignments
    python scripts/align.py outputs/demo_es_en/tiny/<run>

For every decoder layer (heads averaged) it prints AER, precision and recall against the
gold (sure/possible links, Och & Ney 2003) for three readings: the argmax row of each target
word, the same with the "shift" (the row where the word is the decoder's input), and the
intersection of target->source and source->target argmaxes. Then the diagnostics: the mean
row entropy (nats) against log(n) for uniform attention, the same at softmax temperatures 0.5
and 2, and the share of source words that receive less than 0.25 attention in total.

``--output`` writes the alignment of one layer (``--layer``; by default the best one against
the gold, else the last) in Pharaoh format, 0-indexed ``source-target``, one line per pair.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transformer_mt.analysis import format_pharaoh, read_gold, score_layers
from transformer_mt.analysis.report import (
    attend_corpus,
    best_reading,
    clean_gold,
    demo_pairs,
    format_table,
    pick_layer,
    read_sentences,
    score_readings,
)
from transformer_mt.checkpoint import load_model
from transformer_mt.cli import report_user_errors
from transformer_mt.errors import UserError


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "run_dir", type=Path, help="a run directory (or a .ckpt) from scripts/train.py"
    )
    parser.add_argument("--src", type=Path, help="source sentences, one per line")
    parser.add_argument("--tgt", type=Path, help="their translations, one per line")
    parser.add_argument("--gold", type=Path, help="gold alignments: Pharaoh/talp lines or NAACL")
    parser.add_argument("--one-indexed", action="store_true", help="the gold counts words from 1")
    parser.add_argument(
        "--reverse-gold", action="store_true", help="the gold's links are target-source"
    )
    parser.add_argument("--split", default="test", choices=["train", "valid", "test"])
    parser.add_argument("--limit", type=int, default=500, help="demo pairs to align")
    parser.add_argument("--layer", type=int, help="layer written by --output (1-based)")
    parser.add_argument("--method", default="argmax", choices=["argmax", "intersect"])
    parser.add_argument("--shift", action="store_true", help="--output reads shifted rows")
    parser.add_argument("--output", type=Path, help="write Pharaoh links of one layer here")
    parser.add_argument(
        "--average-last", type=int, default=1, help="average the last N checkpoints"
    )
    args = parser.parse_args()
    if (args.src is None) != (args.tgt is None):
        parser.error("--src and --tgt go together")
    return args


def load_pairs(args: argparse.Namespace):
    """Sources, targets, gold (or None) and a description of them."""
    if args.src is None:
        sources, targets, gold = demo_pairs(args.run_dir, args.split, args.limit)
        return sources, targets, gold, f"{len(sources)} {args.split} pairs of the demo corpus"
    sources, targets = read_sentences(args.src), read_sentences(args.tgt)
    if len(sources) != len(targets):
        raise UserError(f"{args.src} has {len(sources)} lines but {args.tgt} has {len(targets)}")
    gold = None
    if args.gold is not None:
        gold, warnings = clean_gold(
            read_gold(args.gold, args.one_indexed, args.reverse_gold), sources, targets, args.gold
        )
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return sources, targets, gold, f"{len(sources)} pairs of {args.src} / {args.tgt}"


@report_user_errors
def main() -> None:
    args = parse_args()
    sources, targets, gold, what = load_pairs(args)
    model, tokenizer, checkpoints = load_model(args.run_dir, average_last=args.average_last)
    print(f"{what}; model {', '.join(p.name for p in checkpoints)}; heads averaged")
    attention = attend_corpus(model, tokenizer, sources, targets)
    rows = score_readings(attention, gold)
    print(format_table(rows))
    if gold is not None:
        name, best = best_reading(rows)
        print(f"best: layer {best.layer} ({name}), AER {best.aer:.3f}")
    if args.output is not None:
        chosen = score_layers(attention, gold, method=args.method, shift=args.shift)
        layer = pick_layer(chosen, args.layer)
        args.output.write_text(
            "".join(format_pharaoh(ls) + "\n" for ls in layer.links), encoding="utf-8"
        )
        print(
            f"wrote {args.output}: layer {layer.layer}, {args.method}{', shift' if args.shift else ''}"
        )


if __name__ == "__main__":
    main()
