"""AER per decoder layer of a trained demo model against the generator's gold alignments.

    python scripts/align.py outputs/demo_es_en/tiny/<run> [--limit 500] [--split test]

The demo corpus stores a gold word alignment for every pair, so the layer whose cross-attention
aligns best can be measured rather than guessed (``align.layer`` in conf/train.yaml).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from transformer_mt.alignment import layer_aer
from transformer_mt.checkpoint import load_model, run_data_config
from transformer_mt.data.dataset import demo_files


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir", type=Path, help="a run directory written by scripts/train.py")
    parser.add_argument("--split", default="test", choices=["train", "valid", "test"])
    parser.add_argument("--limit", type=int, default=500, help="pairs to align")
    args = parser.parse_args()

    data = run_data_config(args.run_dir)
    if data.source != "demo":
        raise SystemExit(
            f"{args.run_dir} was trained on data={data.name}; gold alignments exist for the demo only"
        )
    model, tokenizer, _ = load_model(args.run_dir)
    path = demo_files(data)[args.split]
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(args.limit), f)]
    pairs = [(r["src"], r["tgt"], r["alignment"]) for r in rows]
    print(f"{len(pairs)} {args.split} pairs of {data.name}; AER (lower is better), heads averaged")
    print("layer  AER    AER (shift)")
    for layer, (plain, shifted) in enumerate(
        zip(layer_aer(model, tokenizer, pairs), layer_aer(model, tokenizer, pairs, shift=True)), 1
    ):
        print(f"{layer:>5}  {plain:.3f}  {shifted:.3f}")


if __name__ == "__main__":
    main()
