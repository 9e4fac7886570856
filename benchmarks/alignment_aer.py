"""AER of a trained model's cross-attention next to a classical aligner (eflomal), same data.

    pip install eflomal   # compiles a small C extension; not a dependency of the package
    python benchmarks/alignment_aer.py RUN_DIR \
        --src test.en --tgt test.de --gold de-en.wa --reverse-gold \
        --train-src train.en.gz --train-tgt train.de.gz

eflomal is unsupervised: it aligns the test pairs together with the ``--train-*`` corpus
(give it the corpus the model was trained on, so both saw the same text), lowercased, since
it works on word types. Its two directions are reported and their grow-diag-final-and
symmetrization, the usual way it is used. The model's figure is the best decoder layer of
``scripts/align.py`` (heads averaged), and all of its layers are printed.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

from machine import describe  # benchmarks/machine.py

from transformer_mt.analysis import (
    corpus_attention,
    corpus_scores,
    drop_outside,
    read_gold,
    score_layers,
    symmetrize,
)
from transformer_mt.checkpoint import load_model


def read_corpus(path: Path, limit: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.strip() for _, line in zip(range(limit), f)]


def read_links(path: str) -> list[set[tuple[int, int]]]:
    lines = Path(path).read_text().splitlines()
    return [{tuple(map(int, t.split("-"))) for t in line.split()} for line in lines]


def run_eflomal(sources, targets, train_src, train_tgt):
    try:
        import eflomal
    except ImportError:
        raise SystemExit("eflomal is not installed: pip install eflomal") from None
    import tempfile

    src = [s.lower().split() for s in sources + train_src]
    tgt = [t.lower().split() for t in targets + train_tgt]
    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = f"{tmp}/fwd", f"{tmp}/rev"
        started = time.perf_counter()
        eflomal.Aligner().align(
            [" ".join(s) for s in src],
            [" ".join(t) for t in tgt],
            links_filename_fwd=fwd,
            links_filename_rev=rev,
        )
        seconds = time.perf_counter() - started
        n = len(sources)
        forward, backward = read_links(fwd)[:n], read_links(rev)[:n]
    return forward, backward, seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--src", type=Path, required=True)
    parser.add_argument("--tgt", type=Path, required=True)
    parser.add_argument("--gold", type=Path, required=True)
    parser.add_argument("--one-indexed", action="store_true")
    parser.add_argument("--reverse-gold", action="store_true")
    parser.add_argument("--train-src", type=Path)
    parser.add_argument("--train-tgt", type=Path)
    parser.add_argument("--train-limit", type=int, default=1_000_000)
    parser.add_argument("--average-last", type=int, default=1)
    args = parser.parse_args()
    print(describe())

    sources = args.src.read_text(encoding="utf-8").splitlines()
    targets = args.tgt.read_text(encoding="utf-8").splitlines()
    gold, dropped = drop_outside(
        read_gold(args.gold, args.one_indexed, args.reverse_gold), sources, targets
    )
    for n, bad in dropped.items():
        print(
            f"gold sentence {n}: links {sorted(bad)} outside the sentence, left out",
            file=sys.stderr,
        )
    train_src = read_corpus(args.train_src, args.train_limit) if args.train_src else []
    train_tgt = read_corpus(args.train_tgt, args.train_limit) if args.train_tgt else []

    model, tokenizer, checkpoints = load_model(args.run_dir, average_last=args.average_last)
    started = time.perf_counter()
    attention = corpus_attention(model, tokenizer, sources, targets)
    rows = {
        "argmax": score_layers(attention, gold),
        "shift": score_layers(attention, gold, shift=True),
        "intersect": score_layers(attention, gold, method="intersect"),
    }
    model_seconds = time.perf_counter() - started
    forward, backward, eflomal_seconds = run_eflomal(sources, targets, train_src, train_tgt)

    print(f"{len(sources)} pairs of {args.src.name} / {args.tgt.name}, gold {args.gold.name}")
    print(
        f"model: {args.run_dir} ({len(checkpoints)} checkpoint(s) averaged), {model_seconds:.1f} s"
    )
    print(f"eflomal: {len(train_src)} extra training pairs, {eflomal_seconds:.1f} s\n")
    print("aligner                                   AER     P      R")
    for name, layers in rows.items():
        for s in layers:
            print(
                f"model layer {s.layer} {name:<28}  {s.aer:.3f}  {s.precision:.3f}  {s.recall:.3f}"
            )
    symmetric = [symmetrize(f, b) for f, b in zip(forward, backward)]
    for name, links in (
        ("eflomal source->target", forward),
        ("eflomal target->source", backward),
        ("eflomal grow-diag-final-and", symmetric),
    ):
        aer, p, r = corpus_scores(links, gold)
        print(f"{name:<41} {aer:.3f}  {p:.3f}  {r:.3f}")
    best = min((s for layers in rows.values() for s in layers), key=lambda s: s.aer)
    print(f"\nbest model layer: {best.layer}, AER {best.aer:.3f}")


if __name__ == "__main__":
    main()
