"""Training curves from Lightning's CSV log, saved as one PNG."""

from __future__ import annotations

import csv
from pathlib import Path

from matplotlib.figure import Figure

PANELS = (
    ("train/loss", "val/loss"),
    ("train/ppl", "val/ppl"),
    ("val/bleu",),
    ("train/lr",),
    ("train/grad_norm",),
    ("train/padding",),
)


def metric_files(run_dir: str | Path) -> list[Path]:
    """A run's CSV logs, oldest first: one part per resumed session, then ``metrics.csv``."""
    logs = Path(run_dir) / "logs"
    parts = sorted(logs.glob("metrics.part*.csv"), key=lambda p: int(p.name[12:-4]))
    current = logs / "metrics.csv"
    return parts + ([current] if current.exists() else [])


def set_aside_metrics(run_dir: str | Path) -> None:
    """Before a resumed session: keep the CSV log as a part (Lightning's logger would delete it)."""
    current = Path(run_dir) / "logs" / "metrics.csv"
    if current.exists():
        current.rename(current.with_name(f"metrics.part{len(metric_files(run_dir))}.csv"))


def read_metrics(path: str | Path) -> dict[str, list[tuple[int, float]]]:
    """A metrics CSV, or a run directory's logs -> {name: [(step, value), ...]}.

    For a run directory the parts of resumed sessions are joined; a later session replaces
    what an earlier one logged from the later one's first step on (work done after the
    checkpoint it resumed from, then done again).
    """
    path = Path(path)
    series: dict[str, list[tuple[int, float]]] = {}
    for part in metric_files(path) if path.is_dir() else [path]:
        session: dict[str, list[tuple[int, float]]] = {}
        with open(part, newline="") as f:
            for row in csv.DictReader(f):
                step = int(float(row.get("step") or 0))
                for name, value in row.items():
                    if name not in ("step", "epoch") and value not in ("", None):
                        session.setdefault(name, []).append((step, float(value)))
        for name, points in session.items():
            first = points[0][0]
            series[name] = [p for p in series.get(name, []) if p[0] < first] + points
    return series


def plot_curves(series: dict[str, list[tuple[int, float]]]) -> Figure:
    """Loss, perplexity, BLEU, learning rate, gradient norm and padding against the optimizer step;
    with gold alignments scored while training (``align.gold``), their AER in a seventh panel and
    the guided head's (else the last layer's) AER by source length in an eighth."""
    scored = sorted(n for n in series if n.startswith("val/aer_"))
    aer = tuple(n for n in scored if "_len" not in n)
    by_length = tuple(n for n in scored if "_len" in n)  # the guided head (else last layer)
    panels = PANELS + tuple(p for p in (aer, by_length) if p)
    rows = -(-len(panels) // 3)
    fig = Figure(figsize=(4.2 * 3, 3.4 * rows))  # no pyplot: no global state, any backend
    axes = fig.subplots(rows, 3).flatten()
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for ax, names in zip(axes, panels):
        for name in names:
            if series.get(name):
                steps, values = zip(*series[name])
                ax.plot(
                    steps, values, marker="o" if name.startswith("val") else None, ms=3, label=name
                )
        ax.set_xlabel("step")
        titles = {aer: "alignment error rate", by_length: "AER by source length (words)"}
        ax.set_title(titles.get(names, " / ".join(names)), fontsize=10)
        if names[0].endswith("ppl"):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
