"""Preprocessing at scale: 1M pairs (or WMT14 EN-FR's 36M) read, SentencePiece trained, tokenized, and again from the caches.

    python benchmarks/preprocess.py [--pairs 1000000] [--vocab 8000] [--procs 1 2] [--workdir /tmp/tmt_preprocess]
    python benchmarks/preprocess.py --pairs 36000000 --procs 2     # WMT14 EN-FR's size

The corpus is built by repeating the Anki Spanish-English pairs of ../shared/data (written to
--workdir, never into the project) and read through the same ``data=local`` code path as training:
``Dataset.from_generator`` (streamed into Arrow), a seeded sample for SentencePiece, and
``Dataset.map(batched=True, num_proc=N)``. Tokenization runs once per ``--procs`` entry, each into
a fresh cache so none reuses another; then the whole pipeline runs again on the first cache, which
must be reused (``--second-run-only``: just that, on an existing cache). Each stage prints this
process's peak heap (anonymous memory) and file pages (the memory-mapped Arrow cache, which the
kernel counts in RSS but may drop), then the peak RSS of this process and of its largest worker;
disk is what the corpus files and each cache take.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import resource
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path

from machine import describe  # benchmarks/machine.py

from transformer_mt.config import DataConfig
from transformer_mt.data.sources import load_corpus
from transformer_mt.data.tokenize import tokenize, train_tokenizer

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "anki_spa_eng"


def build_corpus(workdir: Path, pairs: int) -> tuple[Path, Path]:
    src, tgt = workdir / f"corpus{pairs}.es", workdir / f"corpus{pairs}.en"
    if not src.exists():
        with gzip.open(SHARED / "spa-eng.es.gz", "rt") as f:
            es = f.read().splitlines()
        with gzip.open(SHARED / "spa-eng.en.gz", "rt") as f:
            en = f.read().splitlines()
        with open(src, "w") as fs, open(tgt, "w") as ft:
            for (s, t), _ in zip(itertools.cycle(zip(es, en)), range(pairs)):
                fs.write(s + "\n")
                ft.write(t + "\n")
    return src, tgt


def peak_rss_gib() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    return own, children


class RssSampler(threading.Thread):
    """This process's resident memory every 50 ms, split into heap (anonymous) and file pages.

    File pages are the memory-mapped Arrow cache the process has read: the kernel counts them
    in RSS but can drop them at any time, unlike the heap.
    """

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = {"RssAnon": 0, "RssFile": 0}
        self.running = True

    def run(self) -> None:
        while self.running:
            with open("/proc/self/status") as f:
                for line in f:
                    key = line.split(":")[0]
                    if key in self.peak:
                        self.peak[key] = max(self.peak[key], int(line.split()[1]))
            time.sleep(0.05)

    def stop(self) -> dict[str, float]:
        self.running = False
        self.join()
        return {k: v / 2**20 for k, v in self.peak.items()}


def timed(label: str, fn):
    sampler = RssSampler()
    sampler.start()
    start = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - start
    peak = sampler.stop()
    own, children = peak_rss_gib()
    print(
        f"  {label:<44} {seconds:8.1f} s   (this stage's peak: heap {peak['RssAnon']:.2f} GiB, "
        f"file pages {peak['RssFile']:.2f} GiB; peak RSS so far {own:.2f} GiB, "
        f"largest worker so far {children:.2f} GiB)",
        flush=True,
    )
    return out, seconds


def pipeline(cfg: DataConfig, label: str) -> float:
    """Read, train (or reuse) SentencePiece, tokenize; returns the tokenization seconds."""
    print(f"{label}:")
    corpus, _ = timed("read (from_generator into Arrow)", lambda: load_corpus(cfg))
    tokenizer, _ = timed(
        "SentencePiece (seeded sample, train or reuse)", lambda: train_tokenizer(corpus, cfg)
    )
    _, seconds = timed(
        f"tokenize, num_proc={cfg.num_proc}", lambda: tokenize(corpus, tokenizer, cfg)
    )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--input-sentence-size", type=int, default=2_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/tmt_preprocess"))
    parser.add_argument(
        "--second-run-only",
        action="store_true",
        help="only the run from an existing cache1 (after a full run with the same settings)",
    )
    parser.add_argument(
        "--procs",
        type=int,
        nargs="+",
        default=[1, 2],
        help="tokenize once per process count, each into a fresh cache",
    )
    args = parser.parse_args()
    print(describe())
    args.workdir.mkdir(parents=True, exist_ok=True)
    src, tgt = build_corpus(args.workdir, args.pairs)
    if not args.second_run_only:
        for n in range(1, len(args.procs) + 1):
            shutil.rmtree(args.workdir / f"cache{n}", ignore_errors=True)
    dev = [
        str(SHARED.parent / "wmt13_newstest2013_esen" / f"newstest2013.{lang}")
        for lang in ("es", "en")
    ]
    files = {"train": [str(src), str(tgt)], "valid": dev, "test": dev}
    base = DataConfig(
        name="bench",
        source="local",
        src_lang="es",
        tgt_lang="en",
        files=files,
        vocab_size=args.vocab,
        input_sentence_size=args.input_sentence_size,
        cache_dir=str(args.workdir / "cache1"),
    )
    print(
        f"{args.pairs:,} ES-EN pairs (Anki pairs repeated), vocab {args.vocab}, "
        f"SentencePiece sample {args.input_sentence_size:,} sentences"
    )
    seconds = {}
    for n, procs in enumerate([] if args.second_run_only else args.procs, 1):
        cfg = replace(base, num_proc=procs, cache_dir=str(args.workdir / f"cache{n}"))
        seconds[procs] = pipeline(cfg, f"first run, {procs} process(es), empty cache{n}")
    start = time.perf_counter()
    pipeline(replace(base, num_proc=args.procs[0]), "second run, same settings (cache1)")
    again = time.perf_counter() - start
    splits = args.pairs + 2 * 3000  # train, and newstest2013 as valid and test
    own, children = peak_rss_gib()
    rates = ", ".join(f"{splits / s:,.0f} pairs/s with {p} process(es)" for p, s in seconds.items())
    if rates:
        print(f"tokenization: {rates}")
    print(f"second run, whole pipeline: {again:.1f} s")
    print(f"peak RSS: {own:.2f} GiB (this process), {children:.2f} GiB (largest worker)")
    print(
        f"disk: corpus text {du_gib(src) + du_gib(tgt):.2f} GiB; "
        + "; ".join(
            f"cache{n} {du_gib(args.workdir / f'cache{n}'):.2f} GiB"
            for n in range(1, len(args.procs) + 1)
        )
        + " (Arrow text, SentencePiece, Arrow token ids)"
    )


def du_gib(path: Path) -> float:
    """Bytes on disk under ``path`` (a file or a folder), in GiB."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_blocks * 512 for p in files) / 2**30


if __name__ == "__main__":
    main()
