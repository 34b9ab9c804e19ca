#!/usr/bin/env bash
# One call on a GPU machine: build the extension, run the GPU tests, run the main command.
# Everything it produces lands in $OUT (default ./device-out): logs, results.json, results.csv,
# roofline.png. Wheels missing from the machine's image can be carried in .whl/.
#
#   bash benchmarks/device_run.sh [extra roofline flags...]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/device-out}"
mkdir -p "$OUT"
log="$OUT/device_log.txt"
export PYTHONUNBUFFERED=1 CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export PATH="$CUDA_HOME/bin:$PATH"

step() { echo "=== $* ($(date -u +%H:%M:%S))" | tee -a "$log"; }

if compgen -G ".whl/*.whl" >/dev/null; then
  step "carried wheels"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >>"$log" 2>&1 && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

step "environment"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,ecc.mode.current \
    --format=csv; python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"; nvcc --version | tail -1; } \
  >>"$log" 2>&1

step "build (pip install --no-build-isolation --no-deps -e .)"
PYGPUPERF_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -e . >>"$log" 2>&1 || {
  echo "build failed"; tail -60 "$log"; exit 1; }

step "pytest -m gpu"
python3 -m pytest -m gpu -v -rs 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -40

step "python -m pygpuperf.roofline --backend all $*"
python3 -m pygpuperf.roofline --backend all --out "$OUT/run" "$@" 2>&1 | tee "$OUT/roofline_stdout.txt"
cp "$OUT/run/results.json" "$OUT/run/results.csv" "$OUT/run/roofline.png" "$OUT/" 2>/dev/null
rm -rf "$OUT/run"
step "done"
