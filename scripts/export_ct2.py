"""Export a trained run to CTranslate2, the C++ inference engine (pip install -e ".[ct2]").

    python scripts/export_ct2.py outputs/demo_es_en/tiny/<run>                      # -> <run>/ct2
    python scripts/export_ct2.py <run> --average-last 5 --quantization int8 --out demo_int8

The directory holds CTranslate2's model.bin and vocabularies, our tokenizer.model and
transformer_mt.json (the run, the checkpoints, the quantization). Translate with it:

    echo "el gato negro duerme en casa" | python scripts/translate.py <run> --engine ct2
    python scripts/evaluate.py run_dir=<run> decode.engine=ct2

A model CTranslate2 cannot represent (e.g. model.d_k different from d_model / h) is refused
with the reason.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from transformer_mt.cli import ArgumentParser, report_user_errors
from transformer_mt.deploy.ct2 import QUANTIZATIONS, export_ct2


@report_user_errors
def main() -> None:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir", type=Path, help="a run directory from scripts/train.py")
    parser.add_argument("--out", type=Path, help="output directory (default: <run_dir>/ct2)")
    parser.add_argument(
        "--average-last", type=int, default=1, help="average the run's last N checkpoints"
    )
    parser.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        help="weight type: int8 (and int8_float32) for CPUs, float16 / bfloat16 for GPUs",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing directory")
    args = parser.parse_args()
    out = export_ct2(
        args.run_dir,
        args.out or args.run_dir / "ct2",
        args.average_last,
        args.quantization,
        args.force,
    )
    print(f"wrote {out} ({args.quantization or 'float32'})")


if __name__ == "__main__":
    main()
