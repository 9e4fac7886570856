"""Copy what a GPU check needs from the shared data folder into ``.carry/data`` (git-ignored),
so that one device run takes it along: a GPU machine has no ``../shared`` and no internet.

    python benchmarks/gpu_carry.py            # prints the files, their size and the carry list
    # then on the device tool: carry [".carry"]; benchmarks/gpu_check.sh reads .carry/data
    # whenever TRANSFORMER_MT_DATA is unset

What it takes: Multi30k task 1 (experiment=multi30k_base_gpu trains and tests on it) and the
10k-pair WMT EN-DE sample (benchmarks/loader.py builds its corpus from it), READMEs and licences
included. A device run carries at most 64 MiB: a larger copy is refused, nothing written.
"""

from __future__ import annotations

import os
import shutil
import sys
from argparse import ArgumentParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("multi30k_task1", "wmt_ende_toy10k_opennmt")
CARRY_LIMIT = 64 * 2**20  # what the device tool takes along in one call


def carry(data: Path, out: Path) -> list[Path]:
    """Copy ``FOLDERS`` of ``data`` into ``out`` (replacing an older copy); the files copied."""
    missing = [name for name in FOLDERS if not (data / name).is_dir()]
    if missing:
        raise SystemExit(
            f"error: {data} has no {', '.join(missing)}: set TRANSFORMER_MT_DATA to the shared "
            "data folder (or pass --data)"
        )
    files = sorted(p for name in FOLDERS for p in (data / name).rglob("*") if p.is_file())
    size = sum(p.stat().st_size for p in files)
    if size > CARRY_LIMIT:
        raise SystemExit(
            f"error: {size / 2**20:.1f} MiB to carry, over the device run's "
            f"{CARRY_LIMIT / 2**20:.0f} MiB: nothing copied"
        )
    for name in FOLDERS:
        shutil.rmtree(out / name, ignore_errors=True)
        shutil.copytree(data / name, out / name)
        for path in (out / name).rglob("*"):  # the shared copies are read-only
            path.chmod(0o755 if path.is_dir() else 0o644)
    return [out / p.relative_to(data) for p in files]


def main() -> None:
    default = os.environ.get("TRANSFORMER_MT_DATA") or ROOT.parent / "shared" / "data"
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(default), help="the shared data folder")
    parser.add_argument("--out", type=Path, default=ROOT / ".carry" / "data")
    args = parser.parse_args()
    files = carry(args.data, args.out)
    for path in files:
        print(f"{path.stat().st_size:>10,}  {path.relative_to(args.out.parent)}")
    size = sum(p.stat().st_size for p in files)
    print(f"{len(files)} files, {size / 2**20:.1f} MiB of the device run's 64 MiB")
    folder = args.out.resolve().parent
    if folder.is_relative_to(ROOT):  # the device tool carries paths inside the checkout
        print(f'device tool: carry ["{folder.relative_to(ROOT)}"]', file=sys.stderr)


if __name__ == "__main__":
    main()
