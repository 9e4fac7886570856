#!/usr/bin/env bash
# One command for a GPU machine, in two parts that each fit 6 minutes (the device tool runs at
# most 10 minutes a call; a lease is 15 in all), the figures that matter most first:
#   part 1: experiment=multi30k_base_gpu (the paper's base on Multi30k EN->DE, ~4 minutes, then
#           its final evaluation: checkpoints averaged, beam 5; test2016, test2017 and mscoco2017
#           in SacreBLEU and the tokenized, lowercased BLEU), and the base training step's speed
#           and MFU, eager and compiled;
#   part 2: the big step, the gpu-marked tests, peak memory against length, the data loader, and
#           a 3-minute trainer=gpu run of model=base at 25k-token micro-batches, whose tokens/s is
#           printed as a ratio to part 1's step benchmark (the same GPU_CHECK_DIR).
# Writes one Markdown report (default gpu_report.md; run files under gpu_check/).
#
#   python benchmarks/gpu_carry.py                         # here first: the data into .carry/
#   GPU_CHECK_PART=1 bash benchmarks/gpu_check.sh r1.md    # on the device, carry [".carry"]
#   GPU_CHECK_PART=2 bash benchmarks/gpu_check.sh r2.md
#   bash benchmarks/gpu_check.sh [REPORT.md]               # both, about 11 minutes
#
# The data (Multi30k, the WMT sample the loader reads) come from $TRANSFORMER_MT_DATA, else from
# .carry/data (benchmarks/gpu_carry.py), else ../shared/data. Without CUDA it says so, runs the
# CPU-side part (the gpu tests are not run, the step benchmark runs at a toy size) and
# exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."
REPORT=$(realpath -m "${1:-gpu_report.md}")
if [ -z "${TRANSFORMER_MT_DATA:-}" ]; then
    if [ -d .carry/data ]; then DATA=$PWD/.carry/data; else DATA=$(realpath -m ../shared/data); fi
    export TRANSFORMER_MT_DATA=$DATA
fi
WORK=$(realpath -m "${GPU_CHECK_DIR:-gpu_check}")
PY=${PYTHON:-python3}
mkdir -p "$WORK" "$(dirname "$REPORT")"
START=$SECONDS
FAILED=0

# section TITLE TIMEOUT_S COMMAND: runs COMMAND, shows its output live, and appends the command,
# its exit status, its wall time and the last 80 lines of its output to the report.
section() {
    local title=$1 limit=$2 cmd=$3 log t0 rc
    log="$WORK/$(echo "$title" | tr -c 'a-zA-Z0-9\n' '_').log"
    echo -e "\n=== $title: $cmd"
    t0=$SECONDS
    timeout "$limit" bash -c "$cmd" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || FAILED=$((FAILED + 1))
    {
        echo -e "\n## $title\n"
        echo -e "\`$cmd\` — exit $rc$([ "$rc" -eq 124 ] && echo " (timed out at ${limit} s)"), $((SECONDS - t0)) s\n"
        echo '```text'
        grep -v -e '^\s*$' -e 'it/s\]' -e 's/it\]' "$log" | tail -n 80
        echo '```'
    } >>"$REPORT"
}

# only the files that hold gpu-marked tests: collecting the whole suite costs seconds for nothing
GPU_TEST_FILES=$(grep -l "mark.gpu" tests/test_*.py | tr '\n' ' ')
# one interpreter start for both: whether CUDA is here, and the versions the report names
read -r HAS_CUDA VERSIONS < <($PY -c 'import torch, lightning
print(int(torch.cuda.is_available()), f"torch {torch.__version__} (CUDA {torch.version.cuda}), lightning {lightning.__version__}")' 2>/dev/null || echo 0 "torch: not importable")
{
    echo "# GPU check, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores"
    echo "- $VERSIONS"
    if [ "$HAS_CUDA" = 1 ]; then
        echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || $PY -c 'import torch; print(torch.cuda.get_device_name())')"
    else
        echo "- **no CUDA device here**: the GPU sections were skipped; only the CPU-side checks ran"
    fi
} >"$REPORT"

if [ "$HAS_CUDA" != 1 ]; then
    echo "no CUDA device: running the CPU-side checks only"
    # without CUDA every gpu test is deselected (tests/conftest.py); the suite collects them all
    echo -e "\n## gpu-marked tests\n\nnot run: they need CUDA (\`python -m pytest\` deselects them here)" >>"$REPORT"
    section "training step, toy size, CPU" 120 \
        "$PY benchmarks/train_step.py --shapes tiny --batch 8 --steps 2 --warmup 1"
    echo -e "\nTotal: $((SECONDS - START)) s, $FAILED section(s) failed." >>"$REPORT"
    echo "report: $REPORT"
    exit "$((FAILED > 0))"
fi

PART=${GPU_CHECK_PART:-all}
STEP_LOG="$WORK/training_step__base__bf16__eager_and_compiled.log"
# 1000 x 25 tokens: the paper's ~25k target tokens per step; 37k: its EN-DE joint vocabulary.
STEP="$PY benchmarks/train_step.py --device cuda --dtype bf16 --batch 1000 --length 25 --vocab 37000 --steps 10 --warmup 3 --with-compiled"
if [ "$PART" != 2 ]; then
    RECIPE="$WORK/multi30k_base_gpu"
    section "experiment=multi30k_base_gpu, its final evaluation included (averaged, beam 5, three test sets)" 330 \
        "$PY scripts/train.py experiment=multi30k_base_gpu data.local_dir=$TRANSFORMER_MT_DATA/multi30k_task1 output_dir=$RECIPE \
         && $PY benchmarks/run_summary.py $RECIPE"
    section "training step, base, bf16, eager and compiled" 90 "$STEP --shapes base"
fi
if [ "$PART" != 1 ]; then
    section "training step, big, bf16, eager and compiled" 120 "$STEP --shapes big"
    section "gpu-marked tests" 120 "$PY -m pytest -m gpu -q -p no:cacheprovider $GPU_TEST_FILES"
    section "peak memory against length" 60 "$PY benchmarks/memory.py --device cuda"
    section "data loader with pinned memory" 60 \
        "$PY benchmarks/loader.py --pairs ${GPU_CHECK_LOADER_PAIRS:-200000} --batches 200 --pin-memory --workdir $WORK/loader"
    # The step benchmark's eager base tokens/s (part 1's log), against which the run is read.
    STEP_TOK=$(awk '/^base:/{b=1} b && /^transformer_mt /{gsub(",", "", $3); print $3; exit}' "$STEP_LOG" 2>/dev/null)
    section "3-minute trainer=gpu run of model=base on the demo corpus, 25k-token micro-batches" 240 \
        "$PY scripts/train.py model=base trainer=gpu trainer.max_time=00:00:03:00 data.max_tokens=25000 output_dir=$WORK/train_base \
         && $PY benchmarks/run_summary.py $WORK/train_base ${STEP_TOK:+--step-tokens-per-s $STEP_TOK}"
fi
echo -e "\nTotal: $((SECONDS - START)) s, $FAILED section(s) failed." >>"$REPORT"
echo "report: $REPORT"
exit "$((FAILED > 0))"
