"""Draw a trained model's cross-attention for one sentence as labelled heatmaps.

    # translate first, then draw what the model attended to while writing its translation
    python scripts/plot_alignment.py RUN_DIR --src "el gato negro duerme en casa"

    # teacher-force a given target; SVG as well as PNG; decoder layer 2
    python scripts/plot_alignment.py RUN_DIR --src "el gato negro" --tgt "the black cat" \
        --layer 2 --format png svg --out plots/cat

Writes ``<out>_layer<N>.<fmt>`` (one decoder layer, heads averaged: rows target words, columns
source words, with a colour bar) and ``<out>_heads.<fmt>`` (every head of every layer), and
prints, per target word, the source word it attends to most.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from transformer_mt.analysis.heatmaps import save_pair_heatmaps
from transformer_mt.analysis.report import resolve_head
from transformer_mt.checkpoint import load_model
from transformer_mt.cli import report_user_errors


@report_user_errors
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "run_dir", type=Path, help="a run directory (or a .ckpt) from scripts/train.py"
    )
    parser.add_argument("--src", required=True, help="the source sentence")
    parser.add_argument(
        "--tgt", help="a target to teacher-force (default: the model's translation)"
    )
    parser.add_argument("--layer", type=int, default=-1, help="decoder layer, 1-based or -1 (last)")
    parser.add_argument("--format", nargs="+", default=["png"], choices=["png", "svg", "pdf"])
    parser.add_argument("--out", type=Path, default=Path("alignment"), help="output path stem")
    parser.add_argument(
        "--head",
        help="draw one head instead of the layer's mean: L:H (1-based), or best (recorded by "
        "scripts/align.py); overrides --layer",
    )
    parser.add_argument("--no-heads", action="store_true", help="skip the per-head grid")
    parser.add_argument(
        "--average-last", type=int, default=1, help="average the last N checkpoints"
    )
    args = parser.parse_args()
    if not args.src.strip():
        parser.error("--src is empty")

    model, tokenizer, _ = load_model(args.run_dir, average_last=args.average_last)
    layer, head = args.layer, None
    if args.head is not None:
        layer, head, _ = resolve_head(
            args.head, args.run_dir, model.cfg.n_layers, model.cfg.n_heads
        )
    drawn = save_pair_heatmaps(
        model,
        tokenizer,
        args.src,
        args.tgt,
        args.out,
        layer,
        tuple(args.format),
        heads=not args.no_heads,
        head=head,
    )
    print(f"source: {drawn['source']}")
    print(f"{'translation' if drawn['translated'] else 'target'}: {drawn['target']}")
    which = "heads averaged" if drawn["head"] is None else f"head {drawn['head']}"
    print(f"decoder layer {drawn['layer']}, {which}; strongest source word per target word:")
    for target, source in drawn["strongest"]:
        print(f"  {target:>15} <- {source}")
    for name in drawn["files"]:
        print(f"wrote {args.out.parent / name}")


if __name__ == "__main__":
    main()
