"""Translate sentences with a trained run, one per line, in order.

    echo "el gato negro duerme en casa" | python scripts/translate.py outputs/demo_es_en/tiny/<run>
    python scripts/translate.py <run> --input file.es --beam 4 --n-best 3 --alignments > out.txt

Empty lines give empty lines, so the output always has as many lines as the input (times
--n-best, whose lines read ``line ||| translation ||| score``). With --alignments each
translation is followed by ``||| i-j ...``: source word i aligned to target word j, read from the
head every command reads unless told (the run's guided head, else the best head
``scripts/align.py`` recorded, else the last layer's heads averaged) or the one ``--head`` names
(``L:H``, ``L``, ``best``, ``guided``), by the run's tuned grow-diag if ``--tune-on`` recorded
one, else one link per target word (``--method argmax``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transformer_mt.align.extract import EXTRACTIONS
from transformer_mt.align.links import format_pharaoh
from transformer_mt.align.reading import MODES, parse_head
from transformer_mt.analysis.alignment import translation_links
from transformer_mt.checkpoint import load_model
from transformer_mt.cli import ArgumentParser, add_reading_overrides, report_user_errors
from transformer_mt.decoding import DecodeConfig, quantize_for_decoding, translate
from transformer_mt.deploy.ct2 import CT2Translator, attention_links
from transformer_mt.distributed import refuse_several_processes
from transformer_mt.errors import UserError
from transformer_mt.run_config import refuse_removed


def read_lines(path: Path | None) -> list[str]:
    """Lines of ``path`` (stdin when None), decoded as UTF-8; bad bytes are an error naming the line."""
    raw = path.read_bytes() if path else sys.stdin.buffer.read()
    lines = []
    for number, line in enumerate(raw.splitlines(), 1):
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise UserError(
                f"{path or 'stdin'}, line {number}: not valid UTF-8 ({err.reason} at byte {err.start}); "
                "convert the file, e.g. with iconv -f latin1 -t utf-8"
            ) from None
    return lines


@report_user_errors
def main() -> None:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "run", type=Path, help="a run directory written by scripts/train.py, or a .ckpt file in one"
    )
    parser.add_argument("--input", type=Path, help="a text file; default: standard input")
    parser.add_argument(
        "--beam", type=int, default=4, help="beam size; 1 is greedy search (default: 4)"
    )
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty α (default: 0.6)")
    parser.add_argument(
        "--length-norm",
        choices=["gnmt", "power"],
        default="gnmt",
        help="beam scores divided by ((5 + |Y|) / 6)^α (gnmt, the paper's) or |Y|^α (power: "
        "CTranslate2's)",
    )
    parser.add_argument(
        "--n-best", type=int, default=1, help="translations per line (at most --beam)"
    )
    parser.add_argument(
        "--average-last", type=int, default=1, help="average the run's last N checkpoints"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences decoded at once")
    parser.add_argument(
        "--long-inputs",
        choices=["truncate", "error"],
        default="truncate",
        help="sources longer than the model's positions: translate a prefix (warn) or stop",
    )
    parser.add_argument(
        "--alignments", action="store_true", help="append source-target word alignments"
    )
    parser.add_argument(
        "--engine",
        choices=["torch", "ct2"],
        default="torch",
        help="torch (this package) or ct2: CTranslate2 with an export of scripts/export_ct2.py",
    )
    parser.add_argument("--ct2-dir", type=Path, help="the CTranslate2 export (default: RUN/ct2)")
    parser.add_argument(
        "--quantize",
        choices=["int8"],
        help="torch engine: dynamic int8 quantization of every Linear (CPU)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="torch engine: run the decoder step as a torch.compile graph (the same output; "
        "pays off from a few thousand sentences on a CPU, see docs/decoding.md)",
    )
    parser.add_argument(
        "--head",
        help="--alignments from L:H (1-based; negative from the end), L (heads averaged), best "
        "(recorded by scripts/align.py), or guided (the head the run trained with align.guided, "
        "read as trained); default: guided if the run has one, else best if recorded, else the "
        "last layer's heads averaged",
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        help="the rows --alignments reads for L:H or L: causal (default: the row that predicts "
        "the word), shift (the row where it is the input) or full (with the whole translation "
        "as context)",
    )
    parser.add_argument(
        "--method",
        choices=EXTRACTIONS,
        help="how --alignments reads the head's weights: argmax (one link per target word) or "
        "grow-diag (at --tau, else the run's tuned tau); default: the head's own (grow-diag if "
        "scripts/align.py --tune-on recorded a tau for the run, else argmax)",
    )
    parser.add_argument("--tau", type=float, help="grow-diag's tau")
    add_reading_overrides(parser)
    refuse_removed(sys.argv[1:], flags=True)
    args = parser.parse_args()
    if args.n_best > args.beam:
        parser.error(f"--n-best {args.n_best} cannot exceed --beam {args.beam}")
    refuse_several_processes("scripts/translate.py")

    lines = read_lines(args.input)
    cfg = DecodeConfig(
        beam_size=args.beam,
        length_penalty=args.alpha,
        length_norm=args.length_norm,
        batch_size=args.batch_size,
        compile=args.compile,
        engine=args.engine,
    )
    if args.engine == "ct2":
        translate_ct2(args, lines, cfg)
        return
    model, tokenizer, _ = load_model(args.run, average_last=args.average_last)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    reading = parse_head(
        args.head,
        n_layers,
        n_heads,
        args.run,
        args.mode,
        args.method,
        args.tau,
        args.diagonal,
        args.alike,
    )
    model = quantize_for_decoding(model, args.quantize)
    try:
        results = translate(
            model, tokenizer, lines, cfg, n_best=args.n_best, long_inputs=args.long_inputs
        )
    except ValueError as err:
        raise UserError(f"{args.input or 'stdin'}: {err}") from None
    for number, (source, options) in enumerate(zip(lines, results)):
        for option in options:
            text = option.text
            if args.alignments and option.tokens:
                src_ids = tokenizer.encode([source])[0][: model.cfg.max_positions - 1]
                links = translation_links(model, tokenizer, src_ids, option.tokens, reading)
                text += " ||| " + format_pharaoh(links)
            print(f"{number} ||| {text} ||| {option.score:.4f}" if args.n_best > 1 else text)


def translate_ct2(args: argparse.Namespace, lines: list[str], cfg: DecodeConfig) -> None:
    """The same output from CTranslate2; --alignments from the attention it returns (its last
    layer, heads averaged: --head is not available there)."""
    reading_flags = args.head, args.mode, args.tau, args.diagonal
    if args.alignments and (
        any(flag is not None for flag in reading_flags) or args.method not in (None, "argmax")
    ):
        raise UserError(
            "--engine ct2 aligns with the last layer's heads averaged only, as the model "
            "predicts, by argmax (no --head, --mode, --method, --tau or --diagonal); use "
            "--engine torch for those"
        )
    engine = CT2Translator(args.ct2_dir or Path(args.run) / "ct2")
    found = engine.translate(lines, cfg, args.n_best, args.long_inputs, attention=args.alignments)
    results, weights = found if args.alignments else (found, None)
    for number, (source, options) in enumerate(zip(lines, results)):
        for k, option in enumerate(options):
            text = option.text
            if args.alignments and option.tokens:
                src_ids = engine.tokenizer.encode([source])[0][: engine.max_positions - 1]
                links = attention_links(
                    engine.tokenizer, src_ids, option.tokens, weights[number][k]
                )
                text += " ||| " + format_pharaoh(links)
            print(f"{number} ||| {text} ||| {option.score:.4f}" if args.n_best > 1 else text)


if __name__ == "__main__":
    main()
