"""Average checkpoints into a new one (§6.1: the last 5 for base, 20 for big).

    python scripts/average_checkpoints.py outputs/.../<run> --last 5             # -> <run>/checkpoints/averaged_last5.ckpt
    python scripts/average_checkpoints.py a.ckpt b.ckpt c.ckpt --out avg.ckpt

The result loads like any checkpoint of the run (``scripts/evaluate.py ckpt.path=...``,
``scripts/translate.py``); ``evaluate.py ckpt.average_last=N`` averages on the fly instead.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from transformer_mt.checkpoint import average_checkpoints, last_checkpoints
from transformer_mt.cli import ArgumentParser, report_user_errors


@report_user_errors
def main() -> None:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "inputs", nargs="+", type=Path, help="one run directory (with --last) or checkpoint files"
    )
    parser.add_argument("--last", type=int, help="average the run's last N step checkpoints")
    parser.add_argument("--out", type=Path, help="where to write the average")
    args = parser.parse_args()
    if args.last:
        if len(args.inputs) != 1 or not args.inputs[0].is_dir():
            parser.error("--last takes exactly one run directory")
        paths = last_checkpoints(args.inputs[0], args.last)
        out = args.out or args.inputs[0] / "checkpoints" / f"averaged_last{args.last}.ckpt"
    else:
        paths = args.inputs
        if not args.out:
            parser.error("--out is required when averaging a list of files")
        out = args.out
    averaged = average_checkpoints(paths)
    torch.save(averaged, out)
    print(f"averaged {len(paths)} checkpoints -> {out}")
    for path in paths:
        print(f"  {path}")


if __name__ == "__main__":
    main()
