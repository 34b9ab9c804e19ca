#!/usr/bin/env bash
# One call on a GPU machine: build the extension, run the GPU tests, run the main command.
# Everything it produces lands in $OUT (default ./device-out): logs, results.json, results.csv,
# roofline.png. Wheels missing from the machine's image can be carried in .whl/.
#
#   bash benchmarks/device_run.sh [extra roofline flags...]
#   RUN_TESTS=0 bash benchmarks/device_run.sh   # skip the GPU tests (already run on this tree)
source "$(dirname "$0")/device_env.sh"
mkdir -p "$OUT/extras"

step "environment"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,ecc.mode.current \
    --format=csv; python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"; nvcc --version | tail -1; } \
  >>"$log" 2>&1

step "build (pip install --no-build-isolation --no-deps -e .)"
PYGPUPERF_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -e . >>"$log" 2>&1 || {
  echo "build failed"; tail -60 "$log"; exit 1; }

step "SASS of the compute kernels"
python3 benchmarks/sass_summary.py --json "$OUT/extras/sass_summary.json" >"$OUT/extras/sass_summary.txt" 2>&1 ||
  echo "SASS summary failed"

if [ "${RUN_TESTS:-1}" != 0 ]; then
  step "pytest -m 'gpu or multigpu'"
  python3 -m pytest -m "gpu or multigpu" -v -rs 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -40
fi

# The quick suites have time budgets (memory, compute, transfer: < 20 s each): time them on their own.
for family in "memory latency.l1 latency.l2 latency.dram latency.sweep" "compute" "transfer latency.h2d"; do
  tag=${family%% *}
  step "quick $family suite"
  start=$(date +%s.%N)
  python3 -m pygpuperf.roofline --quick --model none --probes $family --out "$OUT/extras/quick-$tag" \
    >"$OUT/extras/quick-$tag.txt" 2>&1 || echo "quick $family suite failed (see extras)"
  echo "quick $family suite: $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s wall, process start included" | tee -a "$log"
done

step "python -m pygpuperf.roofline $*"
python3 -m pygpuperf.roofline --out "$OUT/run" "$@" 2>&1 | tee "$OUT/roofline_stdout.txt"
# Few files come back from a machine: the main ones loose, the rest in extras.tar.gz.
cp "$OUT"/run/results.json "$OUT"/run/results.csv "$OUT"/run/roofline.png "$OUT"/run/report.html "$OUT/" 2>/dev/null
mv "$OUT/run" "$OUT/extras/run"
tar -czf "$OUT/extras.tar.gz" -C "$OUT" extras && rm -rf "$OUT/extras"
step "done"
