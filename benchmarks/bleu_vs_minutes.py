"""Test BLEU against wall-clock training minutes, from the epoch checkpoints of one run.

    python benchmarks/bleu_vs_minutes.py outputs/multi30k_en_de_local/small/<run> [--points 6] [--beam 4]

Each chosen checkpoint decodes the run's test split (beam 4, α 0.6 by default) and is scored
with SacreBLEU on detokenized text; minutes come from ``time/minutes`` that training logs at the
end of every epoch (keep every checkpoint: ``checkpoint.keep_last=-1``). Prints a table and
writes ``bleu_vs_minutes.png`` into the run directory.
"""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from machine import describe  # noqa: E402  (benchmarks/machine.py)

from transformer_mt.checkpoint import load_model, run_data_config  # noqa: E402
from transformer_mt.config import DecodeConfig  # noqa: E402
from transformer_mt.data.sources import load_corpus  # noqa: E402
from transformer_mt.decoding import translate  # noqa: E402
from transformer_mt.metrics import corpus_bleu  # noqa: E402


def epoch_minutes(run: Path) -> dict[int, float]:
    minutes = {}
    with open(run / "logs" / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row.get("time/minutes"):
                minutes[int(row["epoch"])] = float(row["time/minutes"])
    return minutes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", type=Path)
    parser.add_argument(
        "--points", type=int, default=6, help="checkpoints to score, spread over the run"
    )
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    args = parser.parse_args()
    print(describe())
    print(describe())

    minutes = epoch_minutes(args.run)
    ckpts = sorted(
        (int(m.group(1)), p)
        for p in (args.run / "checkpoints").glob("epoch=*-step=*.ckpt")
        if (m := re.match(r"epoch=(\d+)-", p.name))
    )
    if not ckpts:
        raise SystemExit(f"{args.run}/checkpoints has no epoch checkpoints")
    step = max(1, len(ckpts) // args.points)
    chosen = ckpts[step - 1 :: step][-args.points :]
    if chosen[-1] != ckpts[-1]:
        chosen[-1] = ckpts[-1]
    data = run_data_config(args.run)
    test = load_corpus(data)["test"]
    decode = DecodeConfig(beam_size=args.beam, length_penalty=args.alpha, batch_size=64)
    points = []
    print(
        f"{data.name} test ({len(test)} sentences), beam {args.beam}, α {args.alpha}, SacreBLEU 13a"
    )
    print(f"{'epoch':>5} {'minutes':>8} {'BLEU':>6}")
    for epoch, path in chosen:
        model, tokenizer, _ = load_model(path)
        hyps = [r[0].text for r in translate(model, tokenizer, list(test["src"]), decode)]
        bleu = corpus_bleu(hyps, list(test["tgt"]))
        points.append((minutes.get(epoch, float("nan")), bleu.score))
        print(f"{epoch + 1:>5} {points[-1][0]:>8.1f} {bleu.score:>6.2f}")
    print(f"signature: {bleu.signature}")
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.plot(*zip(*points), marker="o")
    ax.set_xlabel("training wall-clock minutes")
    ax.set_ylabel(f"test SacreBLEU (beam {args.beam})")
    ax.set_title(data.name, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.run / "bleu_vs_minutes.png", dpi=130)


if __name__ == "__main__":
    main()
