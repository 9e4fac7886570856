"""Export a trained run to Hugging Face Transformers as a MarianMTModel (pip install -e ".[hf]").

    python scripts/export_hf.py outputs/demo_es_en/tiny/<run>                      # -> <run>/hf
    python scripts/export_hf.py <run> --average-last 5 --out demo_hf

The directory loads with no code of ours, and its logits are ours:

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    model = AutoModelForSeq2SeqLM.from_pretrained("demo_hf")
    tokenizer = AutoTokenizer.from_pretrained("demo_hf")
    batch = tokenizer(["el gato negro duerme en casa"], return_tensors="pt")
    print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))

It holds the weights, config.json, generation_config.json (beam 4, the run's length penalty),
the tokenizer (our SentencePiece model as Marian's) and a model card (README.md: data, config,
test BLEU, the commands that made it). A run Transformers cannot express exactly (pre-LN,
learned positions, d_k different from d_model / h) is refused with the reason, nothing written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from transformer_mt.cli import ArgumentParser, report_user_errors
from transformer_mt.deploy.hf import export_hf


@report_user_errors
def main() -> None:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir", type=Path, help="a run directory from scripts/train.py")
    parser.add_argument("--out", type=Path, help="output directory (default: <run_dir>/hf)")
    parser.add_argument(
        "--average-last", type=int, default=1, help="average the run's last N checkpoints"
    )
    args = parser.parse_args()
    out = export_hf(args.run_dir, args.out, args.average_last)
    print(f"wrote {out}: AutoModelForSeq2SeqLM.from_pretrained({str(out)!r})")


if __name__ == "__main__":
    main()
