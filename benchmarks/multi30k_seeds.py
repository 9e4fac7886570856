"""experiment=multi30k_cpu over several seeds: each test set's BLEU (SacreBLEU and the Multi30k
literature's tokenized lowercased BLEU) as mean and spread, at the recipe's end and at one step
count that every run reached.

    python benchmarks/multi30k_seeds.py --data /path/to/multi30k/data/task1/raw --seeds 1 2 3 --out runs/m30k
    python benchmarks/multi30k_seeds.py --runs runs/m30k/seed1 runs/m30k/seed2 runs/m30k/seed3

With --seeds it trains the recipe once per seed, one run after the other (runs that share the
machine would slow each other), each as ``scripts/train.py`` is typed, then reports on them.
At the end of a run the figures are its own final evaluation (metrics.json, ``final``). At the
fixed step (default: the last step checkpoint that every run holds) each run decodes its test sets
with the settings its final evaluation chose on validation (checkpoints averaged, α), the
averaged checkpoints ending at that step. Prints Markdown tables and writes ``seeds.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import describe  # benchmarks/machine.py

from transformer_mt.checkpoint import load_model, run_data_config
from transformer_mt.config import DecodeConfig, checkpoint_step
from transformer_mt.data.sources import load_corpus
from transformer_mt.decoding import translate
from transformer_mt.scoring import score_translations

ROOT = Path(__file__).resolve().parents[1]
BLEUS = {"bleu": "SacreBLEU", "bleu_tokenized_lowercase": "tok. lc BLEU"}


def train(seed: int, data: str, out: Path, extra: list[str]) -> Path:
    run = out / f"seed{seed}"
    command = [
        sys.executable,
        str(ROOT / "scripts" / "train.py"),
        "experiment=multi30k_cpu",
        f"data.local_dir={data}",
        f"seed={seed}",
        f"hydra.run.dir={run}",
        *extra,
    ]
    print("$", " ".join(command[1:]), flush=True)
    started = time.perf_counter()
    subprocess.run(command, check=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    print(f"seed {seed}: {(time.perf_counter() - started) / 60:.1f} min in all", flush=True)
    return run


def step_checkpoints(run: Path) -> dict[int, Path]:
    found = {}
    for path in (run / "checkpoints").glob("*.ckpt"):
        step = checkpoint_step(path)
        if step is not None:
            found[step] = path
    return found


def at_step(run: Path, step: int) -> dict:
    """The run's test sets decoded with its final choices, from the checkpoints ending at ``step``.

    As many checkpoints are averaged as its final evaluation chose, or as many as the run still
    holds up to ``step`` if fewer (it keeps its last ``checkpoint.keep_last``): the table says so.
    """
    final = json.loads((run / "metrics.json").read_text())["final"]
    checkpoints = step_checkpoints(run)
    count = min(len(final["checkpoints"]), sum(s <= step for s in checkpoints))
    model, tokenizer, sources = load_model(checkpoints[step], average_last=count)
    data = run_data_config(run)
    corpus = load_corpus(data)
    decode = DecodeConfig(beam_size=final["beam_size"], length_penalty=final["length_penalty"])
    scored = {}
    for name in final["splits"]:
        results = translate(model, tokenizer, list(corpus[name]["src"]), decode)
        hyps = [r[0].text for r in results]
        scored[name], _ = score_translations(hyps, corpus[name]["tgt"], data)
    return {"checkpoints": [p.name for p in sources], "splits": scored}


def table(rows: dict[str, dict], title: str) -> list[str]:
    """One line per test set and BLEU: each run's figure, their mean and spread (max - min)."""
    names = list(next(iter(rows.values()))["splits"])
    runs = list(rows)
    lines = [
        f"### {title}",
        "",
        "| test set | BLEU | " + " | ".join(runs) + " | mean | spread |",
        "|---|---|" + "---|" * len(runs) + "---|---|",
    ]
    for name in names:
        for key, label in BLEUS.items():
            values = [rows[r]["splits"][name][key] for r in runs]
            lines.append(
                f"| {name} | {label} | "
                + " | ".join(f"{v:.2f}" for v in values)
                + f" | {statistics.mean(values):.2f} | {max(values) - min(values):.2f} |"
            )
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", help="train one run per seed first")
    parser.add_argument("--data", help="the Multi30k task 1 files (data.local_dir)")
    parser.add_argument("--out", type=Path, default=Path("runs/multi30k_seeds"))
    parser.add_argument("--runs", type=Path, nargs="+", default=[], help="runs to report on")
    parser.add_argument("--step", type=int, help="the fixed step (default: the last all hold)")
    parser.add_argument("overrides", nargs="*", help="further train.py overrides (with --seeds)")
    args = parser.parse_args()
    if args.seeds and not args.data:
        parser.error("--seeds trains: give --data, the folder of the Multi30k files")
    print(describe(), flush=True)
    runs = list(args.runs)
    for seed in args.seeds or []:
        runs.append(train(seed, args.data, args.out, args.overrides))
    if not runs:
        parser.error("give --seeds to train, or --runs to report on")

    metrics = {run.name: json.loads((run / "metrics.json").read_text()) for run in runs}
    end = {name: m["final"] for name, m in metrics.items()}
    steps = {name: m["steps"] for name, m in metrics.items()}  # where each run's training stopped
    common = set.intersection(*(set(step_checkpoints(run)) for run in runs))
    step = args.step or max(common, default=None)
    lines = ["| run | steps | minutes | checkpoints averaged | α |", "|---|---|---|---|---|"]
    for run in runs:
        m, f = metrics[run.name], end[run.name]
        lines.append(
            f"| {run.name} | {steps[run.name]} | {m['wall_seconds'] / 60:.1f} | "
            f"{len(f['checkpoints'])} | {f['length_penalty']:g} |"
        )
    lines += [""] + table(end, "At the recipe's end (35 minutes of training)")
    fixed = {}
    if step is not None:
        fixed = {run.name: at_step(run, step) for run in runs}
        used = ", ".join(
            f"{name} {len(r['checkpoints'])} checkpoint(s)" for name, r in fixed.items()
        )
        lines += table(fixed, f"At step {step}, every run (its own α; averaged: {used})")
    print("\n".join(lines))
    out = (args.out if args.seeds else runs[0].parent) / "seeds.json"
    out.write_text(
        json.dumps(
            {"machine": describe(), "end": end, "step": step, "at_step": fixed, "steps": steps},
            indent=2,
        )
        + "\n"
    )
    print(f"written: {out}")


if __name__ == "__main__":
    main()
