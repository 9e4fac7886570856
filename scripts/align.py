"""Word alignments from a trained model's cross-attention, scored per decoder layer.

    # parallel files (one sentence per line, words separated by spaces) and a gold file
    python scripts/align.py RUN_DIR --src test.en --tgt test.de \
        --gold de-en.wa --reverse-gold --output en-de.align

    # a demo run: its test pairs, scored against the generator's gold alignments
    python scripts/align.py outputs/demo_es_en/tiny/<run>

For every decoder layer (heads averaged) it prints AER, precision and recall against the
gold (sure/possible links, Och & Ney 2003) for three readings: the argmax row of each target
word, the same with the "shift" (the row where the word is the decoder's input), and the
intersection of target->source and source->target argmaxes. Then the diagnostics: the mean
row entropy (nats) against log(n) for uniform attention, the same at softmax temperatures 0.5
and 2, and the share of source words that receive less than 0.25 attention in total.

``--output`` writes the alignment of one layer (``--layer``; by default the best one against
the gold, else the last) in Pharaoh format, 0-indexed ``source-target``, one line per pair.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from transformer_mt.alignment import (
    LayerScores,
    corpus_attention,
    drop_outside,
    format_pharaoh,
    read_gold,
    read_pharaoh,
    score_layers,
)
from transformer_mt.checkpoint import load_model, run_data_config
from transformer_mt.data.dataset import demo_files


def read_lines(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise SystemExit(f"{path}: no such file") from None
    except UnicodeDecodeError as err:
        raise SystemExit(f"{path}: not UTF-8 text ({err})") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            raise SystemExit(f"{path}:{n}: empty line; every line must hold one sentence")
    return lines


def demo_pairs(run_dir: Path, split: str, limit: int):
    data = run_data_config(run_dir)
    if data.source != "demo":
        raise SystemExit(
            f"{run_dir} was trained on data={data.name}: pass --src and --tgt (and --gold) "
            f"files; gold alignments are built in for the demo corpus only"
        )
    with open(demo_files(data)[split], encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(limit), f)]
    gold = [read_pharaoh(r["alignment"]) for r in rows]
    return [r["src"] for r in rows], [r["tgt"] for r in rows], gold


def check_gold(gold, sources: list[str], targets: list[str], path: Path):
    """Drop (and report) gold links outside the sentences, e.g. a known typo in a gold set."""
    try:
        cleaned, dropped = drop_outside(gold, sources, targets)
    except ValueError as err:
        raise SystemExit(f"{path}: {err}") from None
    for n, bad in dropped.items():
        print(
            f"warning: {path} sentence {n}: links {format_pharaoh(bad)} fall outside "
            f"{len(sources[n - 1].split())} source x {len(targets[n - 1].split())} target words; "
            f"left out (wrong --one-indexed or --reverse-gold?)",
            file=sys.stderr,
        )
    return cleaned


def table(rows: dict[str, list[LayerScores]]) -> str:
    plain = rows["argmax"]
    scored = plain[0].aer is not None
    head = "layer"
    if scored:
        head += "  " + "  ".join(f"{name + ' AER/P/R':<20}" for name in rows)
    head += "  entropy  log(n)  H(tau=.5)  H(tau=2)  uncovered"
    lines = [head]
    for i, s in enumerate(plain):
        line = f"{s.layer:>5}"
        if scored:
            line += "  " + "  ".join(
                f"{r[i].aer:.3f} {r[i].precision:.3f} {r[i].recall:.3f}  " for r in rows.values()
            )
        tau = s.entropy_by_tau
        line += f"  {s.entropy:7.3f}  {s.uniform:6.3f}  {tau[0.5]:9.3f}  {tau[2.0]:8.3f}  {s.uncovered:9.1%}"
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "run_dir", type=Path, help="a run directory (or a .ckpt) from scripts/train.py"
    )
    parser.add_argument("--src", type=Path, help="source sentences, one per line")
    parser.add_argument("--tgt", type=Path, help="their translations, one per line")
    parser.add_argument("--gold", type=Path, help="gold alignments: Pharaoh/talp lines or NAACL")
    parser.add_argument("--one-indexed", action="store_true", help="the gold counts words from 1")
    parser.add_argument(
        "--reverse-gold", action="store_true", help="the gold's links are target-source"
    )
    parser.add_argument("--split", default="test", choices=["train", "valid", "test"])
    parser.add_argument("--limit", type=int, default=500, help="demo pairs to align")
    parser.add_argument("--layer", type=int, help="layer written by --output (1-based)")
    parser.add_argument("--method", default="argmax", choices=["argmax", "intersect"])
    parser.add_argument("--shift", action="store_true", help="--output reads shifted rows")
    parser.add_argument("--output", type=Path, help="write Pharaoh links of one layer here")
    parser.add_argument(
        "--average-last", type=int, default=1, help="average the last N checkpoints"
    )
    args = parser.parse_args()

    if (args.src is None) != (args.tgt is None):
        parser.error("--src and --tgt go together")
    if args.src is None:
        sources, targets, gold = demo_pairs(args.run_dir, args.split, args.limit)
        what = f"{len(sources)} {args.split} pairs of the demo corpus"
    else:
        sources, targets = read_lines(args.src), read_lines(args.tgt)
        if len(sources) != len(targets):
            raise SystemExit(
                f"{args.src} has {len(sources)} lines but {args.tgt} has {len(targets)}"
            )
        gold = None
        if args.gold is not None:
            try:
                gold = read_gold(args.gold, args.one_indexed, args.reverse_gold)
            except (ValueError, FileNotFoundError) as err:
                raise SystemExit(str(err)) from None
            gold = check_gold(gold, sources, targets, args.gold)
        what = f"{len(sources)} pairs of {args.src} / {args.tgt}"

    model, tokenizer, checkpoints = load_model(args.run_dir, average_last=args.average_last)
    print(f"{what}; model {', '.join(p.name for p in checkpoints)}; heads averaged")
    try:
        attention = corpus_attention(model, tokenizer, sources, targets, progress=True)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    rows = {
        "argmax": score_layers(attention, gold),
        "shift": score_layers(attention, gold, shift=True),
        "intersect": score_layers(attention, gold, method="intersect"),
    }
    print(table(rows))
    if gold is not None:
        name, best = min(((n, s) for n, r in rows.items() for s in r), key=lambda item: item[1].aer)
        print(f"best: layer {best.layer} ({name}), AER {best.aer:.3f}")

    if args.output is not None:
        chosen = score_layers(attention, gold, method=args.method, shift=args.shift)
        if args.layer is not None:
            if not 1 <= args.layer <= len(chosen):
                raise SystemExit(f"--layer {args.layer}: the model has layers 1..{len(chosen)}")
            layer = chosen[args.layer - 1]
        elif gold is not None:
            layer = min(chosen, key=lambda s: s.aer)
        else:
            layer = chosen[-1]
        args.output.write_text(
            "".join(format_pharaoh(links) + "\n" for links in layer.links), encoding="utf-8"
        )
        print(
            f"wrote {args.output}: layer {layer.layer}, {args.method}{', shift' if args.shift else ''}"
        )


if __name__ == "__main__":
    main()
