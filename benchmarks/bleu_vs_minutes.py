"""Validation BLEU, both ways, against training minutes and against steps, from runs' own logs.

    python benchmarks/bleu_vs_minutes.py runs/m30k/seed1 runs/m30k/seed2 runs/m30k/seed3 --out bleu.png

A run logs, at every validation (``trainer.val_check_interval``), SacreBLEU (``val/bleu``), the
tokenized BLEU its data's literature reports (for Multi30k ``val/bleu_tokenized_lowercase``) and
the training minutes so far (``val/minutes``). Those are greedy translations from the weights of
that moment, not the averaged checkpoints and beam search of the final evaluation: the curve
shows how a run gets there, the final evaluation what it reaches. Nothing is decoded here.
Prints a table per run and draws two panels (minutes, steps) into ``--out``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from transformer_mt.viz.curves import read_metrics  # noqa: E402

KEYS = {"val/bleu": "SacreBLEU", "val/bleu_tokenized_lowercase": "tokenized lowercased BLEU"}


def points(run: Path) -> list[tuple[int, float, dict[str, float]]]:
    """(step, minutes, {key: BLEU}) at each validation the run logged with its minutes."""
    series = read_metrics(run)
    minutes = dict(series.get("val/minutes", []))
    found = []
    for step, value in sorted(minutes.items()):
        bleus = {key: dict(series.get(key, [])).get(step) for key in KEYS}
        found.append((step, value, {k: v for k, v in bleus.items() if v is not None}))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, default=Path("bleu_vs_minutes.png"))
    parser.add_argument("--title", default="experiment=multi30k_cpu, validation (greedy)")
    args = parser.parse_args()

    fig, (by_minutes, by_steps) = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, run in enumerate(args.runs):
        found = points(run)
        if not found:
            raise SystemExit(f"{run}: no validation with val/minutes in its logs")
        print(f"{run.name}: step, minutes, " + ", ".join(KEYS.values()))
        for step, minute, bleus in found:
            print(
                f"  {step:>6} {minute:7.1f} "
                + " ".join(f"{bleus.get(k, float('nan')):6.2f}" for k in KEYS)
            )
        for key, style in zip(KEYS, ("-", "--")):
            rows = [(s, m, b[key]) for s, m, b in found if key in b]
            if not rows:
                continue
            steps, minutes, values = zip(*rows)
            label = f"{run.name}, {KEYS[key]}"
            by_minutes.plot(
                minutes, values, style, color=colours[i % len(colours)], marker=".", label=label
            )
            by_steps.plot(steps, values, style, color=colours[i % len(colours)], marker=".")
    by_minutes.set_xlabel("training minutes (2 CPU cores)")
    by_steps.set_xlabel("optimizer steps")
    by_minutes.set_ylabel("validation BLEU")
    for ax in (by_minutes, by_steps):
        ax.grid(alpha=0.3)
    by_minutes.legend(fontsize=7)
    fig.suptitle(args.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
