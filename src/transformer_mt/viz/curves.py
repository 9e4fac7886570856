"""Training curves from Lightning's CSV log, saved as one PNG."""

from __future__ import annotations

import csv
from pathlib import Path

from matplotlib.figure import Figure

PANELS = (("train/loss", "val/loss"), ("train/ppl", "val/ppl"), ("val/bleu",), ("train/lr",))


def read_metrics(path: str | Path) -> dict[str, list[tuple[int, float]]]:
    """metrics.csv -> {name: [(step, value), ...]} for every non-empty cell."""
    series: dict[str, list[tuple[int, float]]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            step = int(float(row.get("step") or 0))
            for name, value in row.items():
                if name not in ("step", "epoch") and value not in ("", None):
                    series.setdefault(name, []).append((step, float(value)))
    return series


def plot_curves(series: dict[str, list[tuple[int, float]]]) -> Figure:
    """Loss, perplexity, BLEU and learning rate against the optimizer step."""
    fig = Figure(figsize=(4.2 * len(PANELS), 3.4))  # no pyplot: no global state, any backend
    axes = fig.subplots(1, len(PANELS))
    for ax, names in zip(axes, PANELS):
        for name in names:
            if series.get(name):
                steps, values = zip(*series[name])
                ax.plot(
                    steps, values, marker="o" if name.startswith("val") else None, ms=3, label=name
                )
        ax.set_xlabel("step")
        ax.set_title(" / ".join(names), fontsize=10)
        if names[0].endswith("ppl"):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
