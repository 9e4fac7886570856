"""Word alignments from a trained model's cross-attention, scored per decoder layer.

    # parallel files (one sentence per line, words separated by spaces) and a gold file
    python scripts/align.py RUN_DIR --src test.en --tgt test.de \\
        --gold de-en.wa --reverse-gold --output en-de.align

    # a demo run: its test pairs, scored against the generator's gold alignments
    python scripts/align.py outputs/demo_es_en/tiny/<run>

For every decoder layer (heads averaged) it prints AER, precision and recall against the
gold (sure/possible links, Och & Ney 2003) for four readings: the argmax row of each target
word, the same with the "shift" (the row where the word is the decoder's input), the
intersection of target->source and source->target argmaxes, and "full": the argmax row of
attention captured with the whole target as context (how a head trained with
``align.mode=full`` is read). Then the diagnostics: the mean
row entropy (nats) against log(n) for uniform attention, the same at softmax temperatures 0.5
and 2, and the share of source words that receive less than 0.25 attention in total.

With gold, every head of every layer is scored alone as well (and each layer's mean): the AER
grid of the best reading is printed, drawn to ``aer_heads.png`` and written with the best head
to ``best_head.json`` in ``--save-dir`` (default: ``RUN_DIR/align``), where
``translate.py --alignments --head best`` and ``plot_alignment.py --head best`` find it.

``--output`` writes the alignment of one layer (``--layer``), or of one head (``--head L:H``,
``--head best``), in Pharaoh format, 0-indexed ``source-target``, one line per pair; by default
the best layer against the gold, else the last. ``--mode shift|full`` reads it one row later or
from the full-context attention (``--head best`` and ``--head guided`` bring their own).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transformer_mt.align.gold import check_sure, clean_gold, read_gold, read_sentences
from transformer_mt.align.links import format_pharaoh
from transformer_mt.align.reading import MODES, BestHead, HeadReading, parse_head
from transformer_mt.analysis import score_layers
from transformer_mt.analysis.report import (
    CorpusAttention,
    aer_grids,
    attend_corpus,
    best_head,
    best_reading,
    demo_pairs,
    format_by_length,
    format_grid,
    format_table,
    pick_layer,
    score_head_grids,
    score_readings,
)
from transformer_mt.checkpoint import load_model
from transformer_mt.cli import ArgumentParser, report_user_errors
from transformer_mt.errors import UserError
from transformer_mt.viz.alignment import plot_aer_grid


def parse_args() -> argparse.Namespace:
    parser = ArgumentParser(
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
    parser.add_argument("--layer", type=int, help="layer written by --output (as --head L)")
    parser.add_argument(
        "--head",
        help="head written by --output: L:H (1-based; negative from the end), L (the layer's "
        "mean), best (the best head against --gold, or the one recorded for the run) or "
        "guided (the head the run trained, read as trained)",
    )
    parser.add_argument(
        "--save-dir", type=Path, help="where the head grid goes (default: RUN_DIR/align)"
    )
    parser.add_argument("--method", default="argmax", choices=["argmax", "intersect"])
    parser.add_argument(
        "--mode",
        default="causal",
        choices=MODES,
        help="the rows --output reads for L:H or L: causal (the row that predicts the word), "
        "shift (the row where it is the input) or full (attention with the whole target as "
        "context); best and guided bring their own",
    )
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
        check_sure(gold, str(args.gold))
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
    best_head = None
    if gold is not None:
        name, best = best_reading(rows)
        print(f"best layer: {best.layer} ({name}), AER {best.aer:.3f}")
        print(f"  by source length (words): {format_by_length(best.links, gold, sources)}")
        best_head = head_grid(attention, gold, save_dir(args), what)
    if args.output is not None:
        chosen, reading = output_links(args, attention, gold, best_head)
        args.output.write_text(
            "".join(format_pharaoh(ls) + "\n" for ls in chosen.links), encoding="utf-8"
        )
        print(f"wrote {args.output}: layer:head {chosen.name}, {args.method}, {reading.mode}")
        if gold is not None:
            print(
                f"  AER {chosen.aer:.3f}; by source length: {format_by_length(chosen.links, gold, sources)}"
            )


def output_links(args: argparse.Namespace, attention: CorpusAttention, gold, best: BestHead | None):
    """The layer (or head) ``--output`` writes, scored, and the ``HeadReading`` it was read in."""
    n_layers, n_heads = attention.causal[0].shape[:2]
    if args.head == "best" and best is not None:  # the head just chosen against --gold
        reading = best.head_reading
    elif args.head is not None or args.layer is not None:
        text = args.head if args.head is not None else str(args.layer)
        reading = parse_head(text, n_layers, n_heads, run_dir=args.run_dir, mode=args.mode)
    else:  # the best layer against the gold, else the last
        read = attention.full if args.mode == "full" else attention.causal
        chosen = pick_layer(score_layers(read, gold, args.method, args.mode))
        return chosen, HeadReading(chosen.layer, None, args.mode)
    read = attention.full if reading.full_context else attention.causal
    chosen = score_layers(read, gold, args.method, reading.mode, head=reading.head)
    return chosen[reading.layer - 1], reading


def save_dir(args: argparse.Namespace) -> Path:
    if args.save_dir is not None:
        return args.save_dir
    run = args.run_dir if args.run_dir.is_dir() else args.run_dir.parent
    return run / "align"


def head_grid(attention: CorpusAttention, gold, folder: Path, what: str) -> BestHead:
    """Score every head of every layer in each reading; print, draw and record the best reading's grid."""
    grids = score_head_grids(attention, gold)
    best = best_head(grids)
    grid = grids[best.reading]
    print(f"\nAER per head ({best.reading} reading; the last column is the layer's mean):")
    print(format_grid(grid))
    print(f"best head: {best.layer}:{best.head} ({best.reading}), AER {best.aer:.3f}")
    folder.mkdir(parents=True, exist_ok=True)
    fig = plot_aer_grid(
        [[s.aer for s in row] for row in grid], f"AER per head, {best.reading}: {what}"
    )
    fig.savefig(folder / "aer_heads.png", dpi=120)
    best.save(folder / "best_head.json", aer_grids(grids), what)
    print(f"wrote {folder / 'aer_heads.png'} and {folder / 'best_head.json'}")
    return best


if __name__ == "__main__":
    main()
