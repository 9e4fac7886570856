"""Two training configurations read paired over seeds: test BLEU per seed, pooled, by length.

    python benchmarks/paired_bleu.py \
        --base outputs/anki_es_en/small/plain_seed5 outputs/anki_es_en/small/plain_seed1234 \
        --new outputs/anki_es_en/small/until500_seed5 outputs/anki_es_en/small/until500_seed1234

Each ``--base`` run is paired with the ``--new`` run in the same position, which must have been
trained with the same ``seed`` (a run here is a function of its seed and data, so a pair shares
everything but the change under test). Per run it reads the greedy test outputs the training
run wrote (``test.hyp.txt``) and the beam outputs and references of ``scripts/evaluate.py
run_dir=<run> ckpt.average_last=1`` (``eval/test_beam4_avg1``; ``--beam-dir`` names another).

It prints, for greedy and beam: each pair's BLEU, difference and output lengths, the mean and
the standard deviation of the differences, sacrebleu's paired bootstrap on all pairs' lines
pooled (is the difference more than resampling the test sentences would give?), and the BLEU by
reference length in words (where the difference lives). Single runs at 1,000 steps scatter by
1-3 BLEU, so a bar of 0.5 needs several seeds per arm: the standard deviation printed says how
many.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from transformer_mt.metrics import corpus_bleu


@dataclass(frozen=True)
class Run:
    path: Path
    seed: int | None
    refs: list[str]
    outputs: dict[str, list[str]]  # "greedy" / "beam": one line per reference


def read_run(path: Path, beam_dir: str) -> Run:
    """The test references and outputs of one training run, checked to pair up line by line."""
    evaluated = path / "eval" / beam_dir
    needed = {
        "references": evaluated / "ref.txt",
        "greedy": path / "test.hyp.txt",
        "beam": evaluated / "hyp.txt",
    }
    for what, file in needed.items():
        if not file.is_file():
            fix = (
                f"run `python scripts/evaluate.py run_dir={path} ckpt.average_last=1` first "
                "(or name its folder under eval/ with --beam-dir)"
                if file.parent == evaluated
                else "it is written at the end of training; was the run finished?"
            )
            sys.exit(f"error: {path}: no {what} at {file}: {fix}")
    lines = {what: file.read_text(encoding="utf-8").splitlines() for what, file in needed.items()}
    refs = lines.pop("references")
    for what, hyps in lines.items():
        if len(hyps) != len(refs):
            sys.exit(
                f"error: {path}: {len(hyps)} {what} outputs for {len(refs)} references in "
                f"{needed['references']}: decode the whole test set again"
            )
    config = path / "config.yaml"
    seed = yaml.safe_load(config.read_text()).get("seed") if config.is_file() else None
    return Run(path, seed, refs, lines)


def check_pairs(base: list[Run], new: list[Run]) -> None:
    """Pairs share their seed and every run its test set: else the difference is not the change's."""
    if len(base) != len(new):
        sys.exit(
            f"error: {len(base)} --base runs and {len(new)} --new runs: give one of each per "
            "seed, in the same order"
        )
    for i, (b, n) in enumerate(zip(base, new, strict=True), start=1):
        if b.seed != n.seed:
            sys.exit(
                f"error: pair {i}: {b.path} has seed {b.seed}, {n.path} seed {n.seed}: list the "
                "--new runs in the order of the --base runs' seeds"
            )
        if b.refs != base[0].refs or n.refs != base[0].refs:
            odd = b.path if b.refs != base[0].refs else n.path
            sys.exit(
                f"error: {odd} was tested on other references than {base[0].path}: "
                "the runs must share the test set"
            )


def bucket_edges(edges: list[int]) -> list[tuple[int, int | None, str]]:
    """``[5, 8, 12]`` -> 1-5, 6-8, 9-12, >=13 words (lowest, highest or None, name)."""
    bounds = [0, *edges]
    buckets = [(lo + 1, hi, f"{lo + 1}-{hi}") for lo, hi in zip(bounds, bounds[1:], strict=False)]
    return [*buckets, (bounds[-1] + 1, None, f">={bounds[-1] + 1}")]


def report(base: list[Run], new: list[Run], edges: list[int], samples: int) -> list[str]:
    lines = []
    refs = base[0].refs
    for kind in ("greedy", "beam"):
        lines.append(f"== {kind}")
        diffs = []
        for b, n in zip(base, new, strict=True):
            sb, sn = (corpus_bleu(run.outputs[kind], refs) for run in (b, n))
            diffs.append(sn.score - sb.score)
            lines.append(
                f"seed {b.seed}: base {sb.score:.2f}  new {sn.score:.2f}  new-base {diffs[-1]:+.2f}"
                f"  (output/reference length {sb.length_ratio:.3f}, {sn.length_ratio:.3f})"
            )
        spread = f", sd {statistics.stdev(diffs):.2f}" if len(diffs) > 1 else ""
        lines.append(
            f"mean new-base over {_count(len(diffs), 'seed')}: {statistics.mean(diffs):+.2f}{spread}"
        )

        pooled_refs = refs * len(base)
        pooled = {
            name: [line for run in runs for line in run.outputs[kind]]
            for name, runs in (("base", base), ("new", new))
        }
        test = PairedTest(
            list(pooled.items()),
            {"BLEU": BLEU(references=[pooled_refs])},
            references=None,
            test_type="bs",
            n_samples=samples,
        )
        _, scores = test()
        rb, rn = scores["BLEU"]
        lines.append(
            f"pooled ({len(pooled_refs)} lines), paired bootstrap x{samples}: base {rb.score:.2f}  "
            f"new {rn.score:.2f}  p = {rn.p_value:.3f}"
        )

        words = [len(r.split()) for r in pooled_refs]
        for lo, hi, name in bucket_edges(edges):
            rows = [i for i, w in enumerate(words) if w >= lo and (hi is None or w <= hi)]
            if not rows:
                continue
            sub_refs = [pooled_refs[i] for i in rows]
            got = {
                who: corpus_bleu([hyps[i] for i in rows], sub_refs).score
                for who, hyps in pooled.items()
            }
            lines.append(
                f"  reference {name} words ({_count(len(rows) // len(base), 'sentence')}): base "
                f"{got['base']:.2f}  new {got['new']:.2f}  new-base {got['new'] - got['base']:+.2f}"
            )
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--base", nargs="+", type=Path, required=True, help="runs without the change"
    )
    parser.add_argument(
        "--new", nargs="+", type=Path, required=True, help="runs with it, same seeds"
    )
    parser.add_argument("--beam-dir", default="test_beam4_avg1", help="folder under <run>/eval")
    parser.add_argument(
        "--length-edges",
        nargs="+",
        type=int,
        default=[5, 8, 12],
        help="upper bounds of the reference-length buckets in words (default: 1-5, 6-8, 9-12, >=13)",
    )
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap resamples")
    args = parser.parse_args(argv)
    if args.length_edges != sorted(set(args.length_edges)) or args.length_edges[0] < 1:
        parser.error(f"--length-edges must rise from 1 or more, got {args.length_edges}")
    base = [read_run(p, args.beam_dir) for p in args.base]
    new = [read_run(p, args.beam_dir) for p in args.new]
    check_pairs(base, new)
    print("\n".join(report(base, new, args.length_edges, args.samples)))


if __name__ == "__main__":
    main()
