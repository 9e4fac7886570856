"""Export a trained run to Hugging Face Transformers as a MarianMTModel (pip install -e ".[hf]").

    python scripts/export_hf.py outputs/demo_es_en/tiny/<run>                      # -> <run>/hf
    python scripts/export_hf.py <run> --average-last 5 --out demo_hf --repo-id me/demo-es-en --license cc-by-4.0

The directory loads with no code of ours, and its logits are ours:

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    model = AutoModelForSeq2SeqLM.from_pretrained("demo_hf")
    tokenizer = AutoTokenizer.from_pretrained("demo_hf")
    batch = tokenizer(["el gato negro duerme en casa"], return_tensors="pt")
    print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))

It holds the weights, config.json, generation_config.json (the run's beam size and length
penalty), the tokenizer (our SentencePiece model as Marian's; inputs cut to the model's positions
with truncation=True) and a model card safe to publish (README.md: the Hub header, data and its
terms, scores, the command that made it, the settings that define it; no local path). An --out
that holds files is refused unless --overwrite. A run Transformers cannot express exactly (pre-LN,
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
    parser.add_argument(
        "--license",
        default="other",
        help="the weights' licence on the Hub (e.g. cc-by-4.0; default other): the card names "
        "the training data's terms beside it",
    )
    parser.add_argument(
        "--repo-id", help="the Hub id it will be uploaded as (user/name), for the card's example"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace what --out holds already")
    args = parser.parse_args()
    out = export_hf(
        args.run_dir, args.out, args.average_last, args.license, args.repo_id, args.overwrite
    )
    print(f"wrote {out}: AutoModelForSeq2SeqLM.from_pretrained({str(out)!r})")


if __name__ == "__main__":
    main()
