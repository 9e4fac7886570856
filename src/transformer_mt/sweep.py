"""One results table for a Hydra multirun sweep (e.g. the rows of Table 3).

``conf/train.yaml`` registers ``ResultsTable`` as a Hydra callback: when a sweep ends it reads
every job's ``metrics.json`` and writes ``results.md`` and ``results.csv`` into the sweep directory.
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)

COLUMNS = ("job", "overrides", "parameters", "steps", "val_ppl", "val_bleu", "test_bleu")


def collect(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """One row per job directory of the sweep, in job order; jobs that did not finish are marked."""
    rows = []
    jobs = [p for p in Path(sweep_dir).iterdir() if p.is_dir() and p.name.isdigit()]
    for job in sorted(jobs, key=lambda p: int(p.name)):
        overrides_file = job / ".hydra" / "overrides.yaml"
        overrides = " ".join(OmegaConf.load(overrides_file)) if overrides_file.is_file() else ""
        row: dict[str, Any] = {"job": int(job.name), "overrides": overrides}
        metrics = job / "metrics.json"
        if metrics.is_file():
            saved = json.loads(metrics.read_text())
            row.update({k: saved.get(k) for k in COLUMNS[2:]})
        else:
            row.update({k: "did not finish" if k == "val_bleu" else None for k in COLUMNS[2:]})
        rows.append(row)
    # Show what the jobs differ in: overrides shared by every job are left out.
    shared = (
        set.intersection(*(set(r["overrides"].split()) for r in rows)) if len(rows) > 1 else set()
    )
    for row in rows:
        row["overrides"] = " ".join(o for o in row["overrides"].split() if o not in shared)
    return rows


def write_table(sweep_dir: str | Path, rows: list[dict[str, Any]]) -> Path:
    sweep_dir = Path(sweep_dir)
    with open(sweep_dir / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)

    def cell(value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, int) and value > 100_000:
            return f"{value / 1e6:.1f}M"
        return str(value)

    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *("| " + " | ".join(cell(row.get(c)) for c in COLUMNS) + " |" for row in rows),
    ]
    path = sweep_dir / "results.md"
    path.write_text(
        "Dev perplexity and BLEU per job (greedy validation decoding, no averaging).\n\n"
        + "\n".join(lines)
        + "\n"
    )
    return path


class ResultsTable(Callback):
    """Hydra callback: after a multirun, tabulate its jobs' metrics."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.is_dir():
            return
        path = write_table(sweep_dir, collect(sweep_dir))
        log.info("results table: %s", path)
        print(path.read_text())
