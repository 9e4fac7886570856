"""The figures of one training run in a few lines: steps, throughput, BLEU, wall time.

    python benchmarks/run_summary.py outputs/demo_es_en/base/2026-...

Reads the run's ``metrics.json`` and its CSV log (``train/tok_s`` is logged every
``trainer.log_every_n_steps`` steps: target tokens per second over the whole step, data
loading included). ``benchmarks/gpu_check.sh`` prints this after its training run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from transformer_mt.viz.curves import read_metrics


def summary(run_dir: Path, step_tokens_per_s: float | None = None) -> list[str]:
    """Lines describing the run in ``run_dir``; with ``step_tokens_per_s`` (a step benchmark's
    figure for the same model and device), the run's median tokens/s as a ratio to it."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    logged = read_metrics(run_dir)
    tok_s = [v for _, v in logged.get("train/tok_s", [])]
    steps = max((s for series in logged.values() for s, _ in series), default=0)
    lines = [
        f"run: {run_dir}",
        f"last step in the log: {steps}; wall time of the whole run: {metrics['wall_seconds']} s",
    ]
    if tok_s:
        lines.append(
            f"train target tokens/s (whole step, loader included): median {statistics.median(tok_s):,.0f}, "
            f"last {tok_s[-1]:,.0f} ({len(tok_s)} readings)"
        )
        if step_tokens_per_s:
            lines.append(
                f"against the step benchmark's {step_tokens_per_s:,.0f} tokens/s: "
                f"{statistics.median(tok_s) / step_tokens_per_s:.2f}x (aim: at least 0.85)"
            )
    lines.append(
        f"test BLEU {metrics['test_bleu']} ({metrics['test_sentences']} sentences), "
        f"valid BLEU {metrics.get('val_bleu')}, test ppl {metrics.get('test_ppl')}"
    )
    final = metrics.get("final")
    if final:  # the recipe's final evaluation (final: in its config)
        lines.append(
            f"final evaluation: {len(final['checkpoints'])} checkpoint(s) averaged, beam "
            f"{final['beam_size']}, α {final['length_penalty']} (both chosen on valid)"
        )
        for name, scores in final["splits"].items():
            tokenized = scores.get("bleu_tokenized_lowercase")
            lines.append(
                f"  {name}: SacreBLEU {scores['bleu']}"
                + (f", tokenized lowercased BLEU {tokenized}" if tokenized is not None else "")
                + f" ({scores['sentences']} sentences)"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir", type=Path)
    parser.add_argument(
        "--step-tokens-per-s",
        type=float,
        help="benchmarks/train_step.py's tokens/s for the same model and device: print the ratio",
    )
    args = parser.parse_args()
    if not (args.run_dir / "metrics.json").is_file():
        sys.exit(f"error: {args.run_dir} has no metrics.json: is it a finished run directory?")
    print("\n".join(summary(args.run_dir, args.step_tokens_per_s)))


if __name__ == "__main__":
    main()
