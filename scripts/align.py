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
the guided head of a run trained with ``align.guided``, else the best layer against the gold,
else the last. ``--mode shift|full`` reads it one row later or from the full-context attention
(``--head best`` and ``--head guided`` bring their own).

``--method`` says how that head's weights become links: ``argmax`` (one link per target word),
``intersect``, ``threshold`` (every weight of at least tau: zero, one or several links per
target word) or ``grow-diag`` (grow-diag-final-and of the row and column argmaxes of at least
tau). Choose tau on a development set, never on the test set:

    # tune on XL-WA dev, then score and write the test set with the tuned threshold
    python scripts/align.py RUN --head guided --tune-on xlwa:$TRANSFORMER_MT_DATA/word_alignment_gold_esen_xlwa/orig/dev.tsv
    python scripts/align.py RUN --head guided --method threshold --src ... --tgt ... --gold ... --output out.align

``--tune-on`` records tau in ``RUN_DIR/align/extraction.json`` (given alone, without ``--src``
/ ``--tgt``, it only tunes); ``--method`` then uses it
(``--threshold`` overrides it), as does ``translate.py --alignments``. With gold, every method
is scored on the written head.

``--reverse-run RUN_EN_ES`` adds a model trained the other way: its head (the same ``--head``,
resolved in that run) aligns the same pairs turned round, the two heads' word matrices are
merged cell by cell (their geometric mean: a link must be likely both ways) and the merged
matrix is read by ``--method`` (default grow-diag with the tau tuned for the pair, the
development sets' choice); ``--output`` writes those links:

    python scripts/align.py RUN --reverse-run RUN_EN_ES --head guided \
        --tune-on xlwa:$TRANSFORMER_MT_DATA/word_alignment_gold_esen_xlwa/orig/dev.tsv
    python scripts/align.py RUN --reverse-run RUN_EN_ES --head guided --src ... --tgt ... --output both.align
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transformer_mt.align.extract import (
    EXTRACTIONS,
    MERGED_RECORD,
    RECORD,
    TUNING_GRID,
    Extraction,
    merge_directions,
    record_folder,
    save_tuned,
    tune,
)
from transformer_mt.align.gold import (
    check_sure,
    clean_gold,
    load_gold_set,
    read_gold,
    read_sentences,
)
from transformer_mt.align.links import (
    corpus_scores,
    format_pharaoh,
    swap,
)
from transformer_mt.align.reading import (
    MODES,
    BestHead,
    HeadReading,
    guided_reading,
    head_method,
    parse_head,
    run_folder,
)
from transformer_mt.analysis import head_rows, score_layers
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
from transformer_mt.checkpoint import load_model, run_data_config
from transformer_mt.cli import ArgumentParser, report_user_errors
from transformer_mt.config import GoldSetConfig
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
    parser.add_argument(
        "--method",
        choices=EXTRACTIONS,
        help="how the head's weights become links (default: argmax, one per target word; for "
        "--head best the method it scored best with)",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        help="tau of --method threshold / grow-diag (default: the run's tuned value, else "
        "0.3 / 0.0)",
    )
    parser.add_argument(
        "--tune-on",
        metavar="FORMAT:PATH",
        help="choose tau of threshold and grow-diag on this development gold set (xlwa:FILE.tsv "
        "or graca:FOLDER) and record it for the run",
    )
    parser.add_argument(
        "--reverse-run",
        type=Path,
        help="a run trained the other way: its head's matrices are merged with this run's "
        "(geometric mean) and read by --method (default with it: grow-diag)",
    )
    parser.add_argument("--symmetrize", help=argparse.SUPPRESS)  # removed: refused by name
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
    if args.tune_on is not None:
        fmt, sep, path = args.tune_on.partition(":")
        if not sep or fmt not in ("xlwa", "graca") or not path:
            parser.error(
                f"--tune-on {args.tune_on!r}: expected xlwa:FILE.tsv or graca:FOLDER (a development "
                f"gold set; never the test set you report)"
            )
    if args.symmetrize is not None:
        raise UserError(
            f"--symmetrize {args.symmetrize} was removed: --reverse-run merges the two heads' "
            "matrices by their geometric mean, read by --method (default grow-diag), which beat "
            "every other combination (docs/experiments.md)"
        )
    if args.reverse_run is not None and args.method is None:
        args.method = "grow-diag"  # what the development sets chose for the merged pair
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
    Extraction.for_run(args.method or "argmax", args.threshold)  # a bad --threshold: no work
    if args.reverse_run is not None:
        check_reverse(args.run_dir, args.reverse_run)
    if args.tune_on is not None and args.src is None and args.output is None:
        # tuning alone: the development set is all it reads (no --src/--tgt needed)
        if args.gold is not None:
            raise UserError("--gold scores --src/--tgt: pass them, or tune alone")
        model, tokenizer, _ = load_model(args.run_dir, average_last=args.average_last)
        tune_extraction(args, model, tokenizer)
        return
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
    if args.tune_on is not None:
        tune_extraction(args, model, tokenizer)
    method = head_method(args.head, args.method, args.run_dir, best_head)
    extraction = Extraction.for_run(method, args.threshold, save_dir(args))
    if args.output is None and args.reverse_run is None and gold is None:
        return
    chosen, reading = output_links(args, args.run_dir, attention, gold, best_head, extraction)
    print(
        f"\nlinks of {chosen.name} ({reading.mode}) read by {extraction.name}"
        f"{f' ({extraction.source})' if extraction.source not in ('', 'default') else ''}"
    )
    links = chosen.links
    if gold is not None:
        compare_methods(attention, gold, reading, save_dir(args), sources)
    how = f"{extraction.name}, {reading.mode}"
    if args.reverse_run is not None:
        forward = (links, matrices(attention, reading))
        links, both = both_directions(args, forward, sources, targets, gold, extraction)
        how = f"{reading.mode}, {both}"
    if args.output is not None:
        args.output.write_text("".join(format_pharaoh(ls) + "\n" for ls in links), encoding="utf-8")
        print(f"wrote {args.output}: layer:head {chosen.name}, {how}")
    if gold is not None and args.reverse_run is None:
        print(f"  AER {chosen.aer:.3f}; by source length: {format_by_length(links, gold, sources)}")


def output_links(
    args: argparse.Namespace,
    run_dir: Path,
    attention: CorpusAttention,
    gold,
    best: BestHead | None,
    extraction: Extraction,
):
    """The layer (or head) ``--output`` writes, its links read by ``extraction`` and scored,
    and the ``HeadReading`` it was read in."""
    n_layers, n_heads = attention.causal[0].shape[:2]
    if args.head == "best" and best is not None:  # the head just chosen against --gold
        reading = best.head_reading
    elif args.head is not None or args.layer is not None:
        text = args.head if args.head is not None else str(args.layer)
        reading = parse_head(text, n_layers, n_heads, run_dir=run_dir, mode=args.mode)
    elif (guided := guided_reading(run_dir, n_layers, n_heads)) is not None:
        reading = guided  # the head the run was trained to align with
    else:  # the best layer against the gold, else the last
        read = attention.full if args.mode == "full" else attention.causal
        chosen = pick_layer(score_layers(read, gold, "argmax", args.mode))
        reading = HeadReading(chosen.layer, None, args.mode)
    read = attention.full if reading.full_context else attention.causal
    chosen = score_layers(read, gold, extraction, reading.mode, head=reading.head)
    return chosen[reading.layer - 1], reading


def matrices(attention: CorpusAttention, reading: HeadReading) -> list:
    """Per pair, the (W_tgt, W_src) word matrix ``reading`` reads (EOS row and column out)."""
    read = attention.full if reading.full_context else attention.causal
    return [head_rows(words, reading)[:, :-1] for words in read]


def compare_methods(attention: CorpusAttention, gold, reading: HeadReading, folder: Path, sources):
    """Every extraction method on one head, against the gold (tau: tuned for the run, else
    the default)."""
    rows = matrices(attention, reading)
    print(f"{'method':<22} {'AER':>6} {'P':>6} {'R':>6}  by source length")
    for method in EXTRACTIONS:
        extraction = Extraction.for_run(method, None, folder)
        links = [extraction.links(m) for m in rows]
        aer, p, r = corpus_scores(links, gold)
        print(
            f"{extraction.name:<22} {aer:6.3f} {p:6.3f} {r:6.3f}  "
            f"{format_by_length(links, gold, sources)}"
        )


def tune_extraction(args: argparse.Namespace, model, tokenizer) -> None:
    """Choose tau of every method that has one on ``--tune-on``'s pairs alone; record it."""
    fmt, _, path = args.tune_on.partition(":")
    data = run_data_config(run_folder(args.run_dir))
    spec = GoldSetConfig(format=fmt, path=path)
    dev, dropped = load_gold_set(Path(path).stem, spec, data.src_lang, data.tgt_lang).foldable(
        tokenizer
    )
    attention = attend_corpus(model, tokenizer, dev.sources, dev.targets)
    if args.head is None and args.layer is None:
        n_layers, n_heads = attention.causal[0].shape[:2]
        if guided_reading(args.run_dir, n_layers, n_heads) is None:
            raise UserError(
                "--tune-on: name the head to tune for with --head L:H, --head best or --layer L "
                "(a run without align.guided has no head of its own)"
            )
    _, reading = output_links(args, args.run_dir, attention, dev.gold, None, Extraction())
    rows = matrices(attention, reading)
    what, record = reading.name, RECORD
    if args.reverse_run is not None:  # the pair's merged matrices
        theirs, their_reading = reverse_matrices(args, dev.sources, dev.targets, swap(dev.gold))
        rows = [merge_directions(f, b) for f, b in zip(rows, theirs)]
        what = f"{reading.name}, merged with {args.reverse_run}'s {their_reading.name}"
        record = MERGED_RECORD
    chosen, tables = {}, {}
    print(
        f"\ntuning on {args.tune_on} ({len(dev)} pairs{f', {dropped} left out' if dropped else ''}), {what}:"
    )
    for method in TUNING_GRID:
        chosen[method], tables[method] = tune(rows, dev.gold, method)
        cells = "  ".join(f"{tau:g}: {aer:.3f}" for tau, aer, _, _ in tables[method])
        print(f"  {method} AER by tau: {cells}\n    chosen {chosen[method]:g}")
    where = save_tuned(save_dir(args), chosen, f"{args.tune_on} ({what})", tables, record)
    print(f"wrote {where}")


def check_reverse(run_dir: Path, reverse_run: Path) -> None:
    """``--reverse-run`` must translate the other way."""
    ours, theirs = run_data_config(run_folder(run_dir)), run_data_config(run_folder(reverse_run))
    if (theirs.src_lang, theirs.tgt_lang) != (ours.tgt_lang, ours.src_lang):
        raise UserError(
            f"--reverse-run {reverse_run} translates {theirs.src_lang}->{theirs.tgt_lang}; "
            f"{run_dir} translates {ours.src_lang}->{ours.tgt_lang}: it must be "
            f"{ours.tgt_lang}->{ours.src_lang}"
        )


def reverse_matrices(args, sources, targets, reverse_gold):
    """``--reverse-run``'s head (the same ``--head``, resolved in that run) on the pairs turned
    round: its (W_tgt, W_src) word matrices in this run's direction, and its ``HeadReading``."""
    model, tokenizer, _ = load_model(args.reverse_run, average_last=args.average_last)
    attention = attend_corpus(model, tokenizer, targets, sources)
    _, reading = output_links(args, args.reverse_run, attention, reverse_gold, None, Extraction())
    return [m.T for m in matrices(attention, reading)], reading


def both_directions(
    args, forward: tuple[list, list | None], sources, targets, gold, extraction: Extraction
) -> tuple[list, str]:
    """``--reverse-run``: its head on the pairs turned round, its word matrices merged with
    ``forward``'s (this run's links and word matrices) and read by the merged pair's tau; with
    gold, each direction and the merged pair scored. Returns the merged links and how."""
    forward_links, forward_rows = forward
    reverse_gold = swap(gold) if gold is not None else None
    backward_rows, reading = reverse_matrices(args, sources, targets, reverse_gold)
    # the same method; its tau: --threshold, else the one tuned for that run, else this run's
    theirs = Extraction.for_run(extraction.method, args.threshold, save_dir(args, args.reverse_run))
    if theirs.source == "default":
        theirs = extraction
    # read in its own direction (a column argmax there is a row argmax here), turned back
    backward = [{(i, j) for j, i in theirs.links(m.T)} for m in backward_rows]
    print(f"reverse run: links of {reading.name} read by {theirs.name}")
    own = Extraction.for_run(extraction.method, args.threshold, save_dir(args), MERGED_RECORD)
    if own.source == "default":
        print(
            f"note: no tau tuned for the merged pair: {own.name} (tune it with --reverse-run "
            f"{args.reverse_run} --tune-on FORMAT:DEV)"
        )
    merged = [merge_directions(f, b) for f, b in zip(forward_rows, backward_rows)]
    combined = [own.links(m) for m in merged]
    print(f"merged by their geometric mean, read by {own.name} ({own.source})")
    made = f"merged with --reverse-run, read by {own.name}"
    if gold is not None:
        rows = [
            ("forward", forward_links),
            ("reverse", backward),
            (f"merged, {own.name}", combined),
        ]
        print(f"{'direction':<22} {'AER':>6} {'P':>6} {'R':>6}  by source length")
        for name, links in rows:
            aer, p, r = corpus_scores(links, gold)
            print(
                f"{name:<22} {aer:6.3f} {p:6.3f} {r:6.3f}  {format_by_length(links, gold, sources)}"
            )
    return combined, made


def save_dir(args: argparse.Namespace, run_dir: Path | None = None) -> Path:
    """Where this run's (or ``run_dir``'s: the reverse run's) tables and tuned tau go."""
    if run_dir is None and args.save_dir is not None:
        return args.save_dir
    return record_folder(args.run_dir if run_dir is None else run_dir)


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
