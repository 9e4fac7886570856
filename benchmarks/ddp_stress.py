"""Does a two-process launch ever hang? The suite's DDP recipe and its resume, N times in a row.

    python benchmarks/ddp_stress.py [--launches 20] [--timeout 300] [--workdir DIR]

Each round launches, as ``tests/test_recipes.py`` does and as a user types it,
``scripts/train.py experiment=paper_base_en_de trainer=ddp_cpu`` on a small hub-shaped WMT14 copy
(4 steps, a checkpoint every 2), then ``scripts/train.py resume=<run> trainer.max_steps=6`` on it.
Both ranks run in a session of their own; a launch still alive after ``--timeout`` seconds is a
hang: every process of the session gets SIGABRT (``PYTHONFAULTHANDLER`` prints each thread's
Python stack), then SIGKILL, and its stderr is saved as ``hang-<round>-<what>.txt`` in the work
directory. At the end: launches, hangs, failures, seconds per launch, and the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import describe  # benchmarks/machine.py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.conftest import DDP_SIZES, ddp_recipe, write_hub_wmt14  # noqa: E402  (the suite's)


def launch(args: list[str], timeout: float, env: dict) -> tuple[str, float, str]:
    """("ok" | "failed" | "hung", seconds, stderr) of one ``scripts/train.py`` launch."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "train.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "PYTHONFAULTHANDLER": "1"},
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=timeout)
        return ("ok" if proc.returncode == 0 else "failed"), time.perf_counter() - started, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGABRT)  # every rank prints its threads' stacks
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            err = ""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return "hung", time.perf_counter() - started, err


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--launches", type=int, default=20, help="rounds of train + resume")
    parser.add_argument("--timeout", type=float, default=300, help="seconds before a hang")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary one")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="ddp_stress_"))
    work.mkdir(parents=True, exist_ok=True)
    wmt14 = write_hub_wmt14(work / "wmt14", DDP_SIZES)
    recipe = ["experiment=paper_base_en_de", "trainer=ddp_cpu", *ddp_recipe(wmt14, work / "cache")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print(describe(), flush=True)
    counts = {"ok": 0, "failed": 0, "hung": 0}
    seconds: list[float] = []
    for n in range(1, args.launches + 1):
        run = work / "run"
        shutil.rmtree(run, ignore_errors=True)
        for what, launch_args in (
            ("train", [*recipe, "trainer.max_steps=4", f"hydra.run.dir={run}"]),
            ("resume", [f"resume={run}", "trainer.max_steps=6"]),
        ):
            outcome, took, err = launch(launch_args, args.timeout, env)
            counts[outcome] += 1
            seconds.append(took)
            print(f"round {n:3d} {what:6s}: {outcome} in {took:5.1f} s", flush=True)
            if outcome != "ok":
                saved = work / f"{outcome}-{n}-{what}.txt"
                saved.write_text(err)
                print(f"  stderr (each rank's stacks on a hang): {saved}", flush=True)
                break
    total = sum(counts.values())
    print(
        f"{total} launches: {counts['ok']} ok, {counts['hung']} hung, {counts['failed']} failed; "
        f"{sum(seconds) / max(len(seconds), 1):.1f} s per launch (max {max(seconds):.1f} s), "
        f"{sum(seconds) / 60:.1f} min in all"
    )
    sys.exit(1 if counts["hung"] or counts["failed"] else 0)


if __name__ == "__main__":
    main()
