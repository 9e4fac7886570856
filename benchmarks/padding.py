"""Padding with length-bucketed batches (TokenBatchSampler) against random batches of the same budget.

    python benchmarks/padding.py [--src ../shared/data/multi30k_task1/train.en.gz --tgt ...de.gz]

Lengths are whitespace tokens + EOS of each side (a stand-in for SentencePiece pieces: the
ratio is what matters). Both batchings fill at most ``--max-tokens`` padded tokens per side; the
random one takes sentences in a shuffled order. Prints the share of padded positions (both sides)
and the number of batches, i.e. steps per epoch. Training logs the same figure as train/padding.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import numpy as np
from machine import describe  # benchmarks/machine.py

from transformer_mt.data.batching import TokenBatchSampler

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k_task1"


def lengths(path: Path) -> np.ndarray:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return np.array([len(line.split()) + 1 for line in f])


def padding(batches, src, tgt) -> float:
    real = padded = 0
    for b in batches:
        real += src[b].sum() + tgt[b].sum()
        padded += len(b) * (src[b].max() + tgt[b].max())
    return 1 - real / padded


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
    args = parser.parse_args()
    print(describe())
    src, tgt = lengths(args.src), lengths(args.tgt)
    bucketed = list(TokenBatchSampler(src, tgt, args.max_tokens, shuffle=True, seed=0))
    shuffled = random_batches(src, tgt, args.max_tokens)
    print(
        f"{len(src):,} pairs of {args.src.name} / {args.tgt.name}, {args.max_tokens} padded tokens per side"
    )
    print(f"{'batching':<22} {'padding':>8} {'batches':>8}")
    print(f"{'length-bucketed (ours)':<22} {padding(bucketed, src, tgt):>8.1%} {len(bucketed):>8}")
    print(f"{'random order':<22} {padding(shuffled, src, tgt):>8.1%} {len(shuffled):>8}")


if __name__ == "__main__":
    main()
