r"""Draw a trained model's cross-attention for one sentence as labelled heatmaps.

    # translate first, then draw what the model attended to while writing its translation
    python scripts/plot_alignment.py RUN_DIR --src "el gato negro duerme en casa"

    # teacher-force a given target; SVG as well as PNG; decoder layer 2
    python scripts/plot_alignment.py RUN_DIR --src "el gato negro" --tgt "the black cat" \
        --head 2 --format png svg --out plots/cat

    # a beam-search hypothesis (the 2nd of beam 4's n-best) instead of the greedy translation,
    # and bertviz's interactive head and model views as HTML (pip install -e ".[bertviz]")
    python scripts/plot_alignment.py RUN_DIR --src "el gato negro duerme en casa" \
        --beam 4 --hypothesis 2 --html --html-unit words

Writes ``<out>_layer<N>.<fmt>`` (the head every command reads unless told: the run's guided
head, else its recorded best, else the last layer's heads averaged; or ``--head``'s; rows target
words, columns source words, with a colour bar) and ``<out>_heads.<fmt>`` (every head of every layer), and
prints, per target word, the source word it attends to most. ``--html`` adds
``<out>_head_view.html`` and ``<out>_model_view.html``: encoder, decoder and cross-attention of
every layer and head (bertviz; the pages load their scripts from a CDN).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transformer_mt.align.reading import MODES, parse_head
from transformer_mt.analysis.capture import pair_attention
from transformer_mt.checkpoint import load_model
from transformer_mt.cli import ArgumentParser, report_user_errors
from transformer_mt.decoding import DecodeConfig, translate
from transformer_mt.errors import UserError
from transformer_mt.run_config import refuse_removed
from transformer_mt.viz.heatmaps import save_pair_heatmaps


@report_user_errors
def main() -> None:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "run_dir", type=Path, help="a run directory (or a .ckpt) from scripts/train.py"
    )
    parser.add_argument("--src", required=True, help="the source sentence")
    parser.add_argument(
        "--tgt", help="a target to teacher-force (default: the model's translation)"
    )
    parser.add_argument("--format", nargs="+", default=["png"], choices=["png", "svg", "pdf"])
    parser.add_argument("--out", type=Path, default=Path("alignment"), help="output path stem")
    parser.add_argument(
        "--head",
        help="L:H (1-based; negative from the end), L (the layer's heads averaged), best "
        "(recorded by scripts/align.py) or guided (the head the run trained, read as trained); "
        "default: guided if the run has one, else best if recorded, else the last layer",
    )
    parser.add_argument("--no-heads", action="store_true", help="skip the per-head grid")
    parser.add_argument(
        "--mode",
        choices=MODES,
        help="the rows drawn for L:H or L: causal (default: the row that predicts each word), "
        "shift (the row where it is the input) or full (with the whole target as context)",
    )
    parser.add_argument(
        "--beam", type=int, default=1, help="draw a beam-search hypothesis (default 1: greedy)"
    )
    parser.add_argument(
        "--hypothesis", type=int, default=1, help="which of the beam's n-best to draw (1-based)"
    )
    parser.add_argument("--alpha", type=float, default=0.6, help="beam search's length penalty α")
    parser.add_argument(
        "--html", action="store_true", help="also write bertviz head_view and model_view HTML"
    )
    parser.add_argument(
        "--html-unit",
        choices=["pieces", "words"],
        default="pieces",
        help="tokens of the HTML views",
    )
    parser.add_argument(
        "--average-last", type=int, default=1, help="average the last N checkpoints"
    )
    refuse_removed(sys.argv[1:], flags=True)
    args = parser.parse_args()
    if not args.src.strip():
        parser.error("--src is empty")

    if args.beam < 1 or not 1 <= args.hypothesis <= args.beam:
        parser.error(f"--hypothesis {args.hypothesis} must be between 1 and --beam {args.beam}")
    if args.tgt is not None and (args.beam > 1 or args.hypothesis > 1):
        parser.error("--tgt is teacher-forced: --beam and --hypothesis pick a translation instead")
    if args.html:
        from transformer_mt.viz.bertviz_html import bertviz_html, require_bertviz

        require_bertviz()  # before any work: say which extra is missing

    model, tokenizer, _ = load_model(args.run_dir, average_last=args.average_last)
    target = args.tgt
    if args.beam > 1:  # the chosen hypothesis of the n-best, teacher-forced like a given target
        cfg = DecodeConfig(beam_size=args.beam, length_penalty=args.alpha, batch_size=1)
        found = translate(model, tokenizer, [args.src], cfg, args.hypothesis, long_inputs="error")
        if len(found[0]) < args.hypothesis:
            raise UserError(f"beam {args.beam} found only {len(found[0])} hypotheses")
        target = found[0][args.hypothesis - 1].tokens
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    reading = parse_head(args.head, n_layers, n_heads, run_dir=args.run_dir, mode=args.mode)
    drawn = save_pair_heatmaps(
        model,
        tokenizer,
        args.src,
        target,
        args.out,
        reading,
        tuple(args.format),
        heads=not args.no_heads,
    )
    print(f"source: {drawn['source']}")
    what = "target" if args.tgt is not None else "translation"
    if args.beam > 1:
        what = f"beam {args.beam} hypothesis {args.hypothesis}"
    print(f"{what}: {drawn['target']}")
    which = "heads averaged" if drawn["head"] is None else f"head {drawn['head']}"
    print(f"decoder layer {drawn['layer']}, {which}; strongest source word per target word:")
    for target_word, source_word in drawn["strongest"]:
        print(f"  {target_word:>15} <- {source_word}")
    for name in drawn["files"]:
        print(f"wrote {args.out.parent / name}")
    if args.html:
        pair = pair_attention(model, tokenizer, args.src, target, full_context=reading.full_context)
        for view in ("head", "model"):
            path = args.out.parent / f"{args.out.name}_{view}_view.html"
            path.write_text(bertviz_html(pair, view, args.html_unit), encoding="utf-8")
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
