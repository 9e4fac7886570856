"""Padding with length-bucketed batches (TokenBatchSampler) against random batches of the same budget.

    python benchmarks/padding.py [--src ../shared/data/multi30k_task1/train.en.gz --tgt ...de.gz]
    python benchmarks/padding.py --pad-multiple 8 16 32   # widths rounded as trainer.compile does

Lengths are whitespace tokens + EOS of each side (a stand-in for SentencePiece pieces: the
ratio is what matters). Both batchings fill at most ``--max-tokens`` padded tokens per side; the
random one takes sentences in a shuffled order. Prints the share of padded positions (both sides)
and the number of batches, i.e. steps per epoch, and the number of distinct (source, target) widths,
i.e. the graphs a compiled training step (``trainer.compile=true``) builds in an epoch. Training logs
the padding share as train/padding.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import numpy as np
from machine import describe  # benchmarks/machine.py

from transformer_mt.data.batching import TokenBatchSampler, round_up

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k_task1"


def lengths(path: Path) -> np.ndarray:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return np.array([len(line.split()) + 1 for line in f])


def padding(batches, src, tgt, multiple: int = 1) -> float:
    """Share of padded positions, both sides, widths rounded up to ``multiple`` as collated."""
    real = padded = 0
    for b in batches:
        real += src[b].sum() + tgt[b].sum()
        padded += len(b) * (round_up(src[b].max(), multiple) + round_up(tgt[b].max(), multiple))
    return 1 - real / padded


def shapes(batches, src, tgt, multiple: int = 1) -> int:
    """Distinct (source, target) widths: the graphs a compiled step builds (batch size symbolic)."""
    return len(
        {(round_up(src[b].max(), multiple), round_up(tgt[b].max(), multiple)) for b in batches}
    )


def random_batches(src, tgt, max_tokens, seed=0):
    order = np.random.default_rng(seed).permutation(len(src))
    batches, current, longest = [], [], 0
    for i in order:
        width = max(longest, src[i], tgt[i] + 1)
        if current and width * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, width = [], max(src[i], tgt[i] + 1)
        current.append(i)
        longest = width
    return batches + [current]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--src", type=Path, default=DATA / "train.en.gz")
    parser.add_argument("--tgt", type=Path, default=DATA / "train.de.gz")
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument(
        "--pad-multiple",
        type=int,
        nargs="*",
        default=[8, 16],
        help="also batch with widths rounded up to these multiples (data.pad_multiple, which "
        "trainer.compile=true sets to 16)",
    )
    args = parser.parse_args()
    print(describe())
    src, tgt = lengths(args.src), lengths(args.tgt)
    bucketed = list(TokenBatchSampler(src, tgt, args.max_tokens, shuffle=True, seed=0))
    shuffled = random_batches(src, tgt, args.max_tokens)
    print(
        f"{len(src):,} pairs of {args.src.name} / {args.tgt.name}, {args.max_tokens} padded tokens per side"
    )
    print(f"{'batching':<34} {'padding':>8} {'batches':>8} {'shapes':>7}")
    rows = [("length-bucketed (ours)", bucketed, 1), ("random order", shuffled, 1)]
    for m in args.pad_multiple:
        rounded = list(
            TokenBatchSampler(src, tgt, args.max_tokens, shuffle=True, seed=0, pad_multiple=m)
        )
        rows.append((f"ours, widths rounded up to x{m}", rounded, m))
    for name, batches, m in rows:
        print(
            f"{name:<34} {padding(batches, src, tgt, m):>8.1%} {len(batches):>8} "
            f"{shapes(batches, src, tgt, m):>7}"
        )
    print("shapes: distinct (source, target) widths, the graphs a compiled training step builds")


if __name__ == "__main__":
    main()
