#!/usr/bin/env bash
# pipeline("translation") on an exported run, against scripts/translate.py, on Transformers 4.x.
# Transformers 5 deleted the translation pipeline (huggingface/transformers#43256), and 4.x cannot
# sit beside the project's environment (it needs huggingface-hub < 1.0; datasets and gradio need
# >= 1.16), so this builds a venv of its own on top of it, once, under .cache/hf4, and runs there.
# Exits 1 when the two translations differ.
#
#   bash benchmarks/hf_pipeline_v4.sh RUN ["el gato negro duerme en casa"]
set -euo pipefail
cd "$(dirname "$0")/.."
run=${1:?usage: bash benchmarks/hf_pipeline_v4.sh RUN [SENTENCE]}
sentence=${2:-"el gato negro duerme en casa"}
env=.cache/hf4
if [ ! -x "$env/bin/python" ]; then
    echo "building $env: the project's packages plus transformers 4.x (once)" >&2
    python -m venv --system-site-packages "$env"
    "$env/bin/python" -m pip install --quiet "transformers>=4.46,<5"
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
python scripts/export_hf.py "$run" --out "$out/hf" >&2
theirs=$(SENTENCE="$sentence" DIR="$out/hf" "$env/bin/python" -c '
import os, transformers
from transformers import pipeline
translate = pipeline("translation", model=os.environ["DIR"])
print(transformers.__version__, translate(os.environ["SENTENCE"])[0]["translation_text"], sep="\t")')
ours=$(echo "$sentence" | python scripts/translate.py "$run")
echo "transformers ${theirs%%$'\t'*}"
echo "pipeline:     ${theirs#*$'\t'}"
echo "translate.py: $ours"
[ "${theirs#*$'\t'}" = "$ours" ] && echo "identical" || { echo "DIFFERENT"; exit 1; }
