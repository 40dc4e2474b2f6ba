#!/usr/bin/env bash
# aha on NVIDIA GPUs, for whoever has a Linux machine with one (the machines aha is built on have
# none). From the repository root:
#
#   bash bench/gpu_check.sh            # everything below; results under gpu_check/
#   STEPS=20 bash bench/gpu_check.sh   # a longer demo
#   DEVICE=cpu STEPS=1 PAIRS=1 bash bench/gpu_check.sh   # a rehearsal of the script on a CPU
#
# 1. installs as `make install` does (on Linux, PyPI's torch==2.13.0 is its CUDA build; a .venv
#    that already holds the CPU build keeps it: remove .venv first) and prints what torch sees;
#    the Makefile's Python is python3.11 (PYTHON=python3.12 bash bench/gpu_check.sh for another);
# 2. the GPU tests (tests/test_gpu.py, tests/test_device.py): a tiny-model GRPO run on one GPU
#    against the same run on the CPU, a resume on the GPU, and with two GPUs or more, two FSDP2
#    ranks over NCCL against one GPU for rl and dpo (the numbers docs/scaling.md proves on CPU ranks);
# 3. the demo (configs/quickstart.yaml, the embedded SmolLM2-135M) on one GPU, and on two
#    FSDP2 ranks where there are two GPUs: held-out accuracy, time a step, peak GPU memory;
# 4. `aha bench --no-trl` on the GPU: the figures `aha bench` prints on a CPU.
# Send gpu_check/summary.txt with the GPU's name to the project.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_check}
STEPS=${STEPS:-5}
PAIRS=${PAIRS:-3}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
make install >"$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; exit 1; }
PY=.venv/bin/python
AHA=.venv/bin/aha

summary() { echo "$@" | tee -a "$OUT/summary.txt"; }
: >"$OUT/summary.txt"
$PY - "$DEVICE" <<'PY' | tee -a "$OUT/summary.txt"
import sys
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s)")
if not torch.cuda.is_available() and sys.argv[1] == "cuda":
    raise SystemExit("torch sees no CUDA GPU: nothing to check (is this torch a CPU build? see gpu_check/install.log)")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"  cuda:{i} {p.name}, {p.total_memory / 2**30:.0f} GiB, native bf16 {p.major >= 8}")
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
GPUS=$($PY -c "import torch; print(torch.cuda.device_count())")

summary "== GPU tests"
$PY -m pytest -q -rs tests/test_gpu.py tests/test_device.py 2>&1 | tee "$OUT/tests.log" | tail -8 | tee -a "$OUT/summary.txt"

demo() {  # name, overrides...: the quickstart on the GPU(s), its closing lines and per-step times
    local name=$1; shift
    summary "== demo: $name ($*)"
    rm -rf "$OUT/$name"
    if $AHA train configs/quickstart.yaml "device=$DEVICE" "train.steps=$STEPS" "output_dir=$OUT/$name" \
            train.resume=false "$@" >"$OUT/$name.log" 2>&1; then
        grep -E "held-out greedy accuracy:|^time:|peak (resident|GPU)" "$OUT/$name.log" | tee -a "$OUT/summary.txt"
    else
        summary "FAILED: see $OUT/$name.log"; tail -30 "$OUT/$name.log" | tee -a "$OUT/summary.txt"
    fi
}
demo one_process
if [ "$GPUS" -ge 2 ] || [ "$DEVICE" = cpu ]; then
    demo two_ranks distributed.processes=2
else
    summary "== demo on two ranks: skipped (one GPU; NCCL needs a GPU a rank)"
fi

summary "== aha bench --no-trl on the GPU"
if $AHA bench configs/quickstart.yaml "device=$DEVICE" --no-trl --pairs "$PAIRS" --steps "$((STEPS + 1))" --json "$OUT/bench.json" >"$OUT/bench.log" 2>&1; then
    grep -E "^bench:|^\|" "$OUT/bench.log" | tee -a "$OUT/summary.txt"
else
    summary "FAILED: see $OUT/bench.log"; tail -30 "$OUT/bench.log" | tee -a "$OUT/summary.txt"
fi
summary "done: $OUT/summary.txt"
