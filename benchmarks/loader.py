"""Can the data loader feed a GPU? Batches/s of the real training loader on a WMT14 EN-DE-sized corpus.

    python benchmarks/loader.py [--pairs 4500000] [--max-tokens 25000] [--workers 0 2] [--batches 300]

The corpus repeats the 10,000 WMT EN-DE training pairs (Europarl, CommonCrawl, news-commentary:
WMT-like lengths) of $TRANSFORMER_MT_DATA/wmt_ende_toy10k_opennmt (default ../shared/data) up to
``--pairs`` lines in ``--workdir`` (never in the project), and goes through the same ``data=local`` path as training: read into Arrow, SentencePiece on a
seeded sample, tokenized with ``Dataset.map`` (all cached, so a second run starts at once). Then
``TranslationDataModule.train_dataloader()`` (the token-bucket sampler, row fetch from Arrow,
collate, and with ``--pin-memory`` page-locked batches as a CUDA run uses) is iterated for ``--batches`` batches of
``--max-tokens`` padded target tokens, once per worker count. A batch every 54 ms is what one
H200 consumes at the goal pace of the paper's base run (100k steps in 1.5 h): 18.5 batches/s.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import os
import resource
import sys
import time
from pathlib import Path

import torch
from machine import describe  # benchmarks/machine.py
from torch.utils.data import DataLoader

from transformer_mt.config import DataConfig
from transformer_mt.data.batching import Batch, TokenBatchSampler, TokenRows
from transformer_mt.datamodule import TranslationDataModule
from transformer_mt.model.vocab import BOS_ID, PAD_ID

# the data folder: $TRANSFORMER_MT_DATA as the recipes read it, else ../shared/data beside the checkout
DATA = Path(
    os.environ.get("TRANSFORMER_MT_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data"
)
SHARED = DATA / "wmt_ende_toy10k_opennmt"
GOAL_BATCHES_PER_S = 100_000 / 5400  # the paper's base run in 1.5 h on one GPU


def build_corpus(workdir: Path, pairs: int) -> dict[str, list[str]]:
    """``pairs`` lines of the WMT sample, repeated, and its first 1,000 as valid/test; cached."""
    src, tgt = workdir / f"wmt{pairs}.en", workdir / f"wmt{pairs}.de"
    small = [workdir / "wmt1000.en", workdir / "wmt1000.de"]
    if not src.exists():
        if not (SHARED / "src-train.txt.gz").exists():
            sys.exit(
                f"error: the WMT EN-DE sample this benchmark repeats is not at {SHARED}: "
                "set TRANSFORMER_MT_DATA to the folder that holds wmt_ende_toy10k_opennmt/"
            )
        workdir.mkdir(parents=True, exist_ok=True)
        with gzip.open(SHARED / "src-train.txt.gz", "rt", encoding="utf-8") as f:
            en = f.read().splitlines()
        with gzip.open(SHARED / "tgt-train.txt.gz", "rt", encoding="utf-8") as f:
            de = f.read().splitlines()
        with open(src, "w", encoding="utf-8") as fs, open(tgt, "w", encoding="utf-8") as ft:
            for (s, t), _ in zip(itertools.cycle(zip(en, de)), range(pairs)):
                fs.write(s + "\n")
                ft.write(t + "\n")
        for path, lines in zip(small, (en, de)):
            path.write_text("".join(line + "\n" for line in lines[:1000]), encoding="utf-8")
    train, dev = [str(src), str(tgt)], [str(p) for p in small]
    return {"train": train, "valid": dev, "test": dev}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=4_500_000)
    parser.add_argument("--max-tokens", type=int, default=25_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument(
        "--baseline-batches",
        type=int,
        default=30,
        help="batches read through the loader before the columnar fetch (0: skip it)",
    )
    parser.add_argument("--vocab", type=int, default=37_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/tmt_loader"))
    parser.add_argument(
        "--pin-memory", action="store_true", help="page-locked batches, as training on a GPU uses"
    )
    args = parser.parse_args()
    print(describe())

    started = time.perf_counter()
    files = build_corpus(args.workdir, args.pairs)
    cfg = DataConfig(
        name=f"wmt_like_{args.pairs}",
        source="local",
        src_lang="en",
        tgt_lang="de",
        files=files,
        vocab_size=args.vocab,
        max_len=256,
        max_tokens=args.max_tokens,
        num_proc=2,
        cache_dir=str(args.workdir / "cache"),
    )
    data = TranslationDataModule(cfg, pin_memory=args.pin_memory)
    data.setup("fit")
    print(f"corpus, tokenizer and tokenized cache ready: {time.perf_counter() - started:.1f} s")
    train = data.splits["train"]
    t = time.perf_counter()
    src_lens, tgt_lens = TokenRows(train).lengths()
    read = time.perf_counter() - t
    t = time.perf_counter()
    plan = TokenBatchSampler(src_lens, tgt_lens, args.max_tokens, seed=1)
    n_batches = len(plan)
    print(f"lengths of {len(train):,} pairs read: {read:.2f} s")
    print(
        f"epoch plan for {len(train):,} pairs: {time.perf_counter() - t:.2f} s, "
        f"{n_batches:,} batches of <= {args.max_tokens:,} padded tokens per side"
    )
    print(f"resident now: {rss_gib():.2f} GiB")
    rates = {}
    for workers in args.workers:
        cfg.num_workers = workers
        rates[workers] = measure(f"num_workers={workers}", data.train_dataloader(), args.batches)
    if args.baseline_batches:
        # The loader before: datasets' own row fetch (a slice per row) and a collate in Python per
        # row, on the same sampler and data; fewer batches, as it is slow on a large table.
        loader = data.train_dataloader()
        old = DataLoader(
            data.splits["train"].with_format(columns=["src_ids", "tgt_ids", "index"]),
            batch_sampler=loader.batch_sampler,
            collate_fn=rows_collate,
        )
        before = measure("before (rows via datasets)", old, args.baseline_batches)
        print(f"ratio, no worker, now / before: {rates.get(0, float('nan')) / before:.1f}x")
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    print(
        f"resident at the end: {rss_gib():.2f} GiB; peak RSS (building the cache included): "
        f"this process {own:.2f} GiB, largest child {children:.2f} GiB"
    )


def rss_gib() -> float:
    """This process's resident set now (pages of the memory-mapped cache it has touched included)."""
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kib / 2**20


def rows_collate(rows: list[dict]):
    """The pre-columnar collate: a tensor per row and side, padded one row at a time."""
    lens = [len(r["tgt_ids"]) for r in rows]

    def pad(seqs):
        out = torch.full((len(seqs), max(map(len, seqs))), PAD_ID, dtype=torch.long)
        for i, s in enumerate(seqs):
            out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
        return out

    tgt_in = pad([[BOS_ID] + r["tgt_ids"][:-1] for r in rows])
    return Batch(
        pad([r["src_ids"] for r in rows]),
        tgt_in,
        pad([r["tgt_ids"] for r in rows]),
        torch.as_tensor([r["index"] for r in rows]),
        sum(lens),
    )


def measure(label: str, loader, batches: int) -> float:
    it = iter(loader)
    next(it)  # workers started, first batch: not timed
    t, n, tokens = time.perf_counter(), 0, 0
    for batch in itertools.islice(it, batches):
        n, tokens = n + 1, tokens + batch.n_tgt_tokens
    seconds = time.perf_counter() - t
    rate = n / seconds
    print(
        f"{label}: {rate:6.1f} batches/s ({tokens / seconds:,.0f} target tokens/s, "
        f"{n} batches, pinned memory: {loader.pin_memory}); {rate / GOAL_BATCHES_PER_S:.1f}x "
        f"what one GPU at the goal pace consumes ({GOAL_BATCHES_PER_S:.1f}/s); "
        f"resident {rss_gib():.2f} GiB"
    )
    return rate


if __name__ == "__main__":
    main()
