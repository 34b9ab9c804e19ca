#!/usr/bin/env bash
# One call: build, the GPU tests, and the plain-loop comparison of every built-in GPU workload
# (the tool's step time against a loop with no sync per step). LOOP_NAMES picks workloads (default: every
# GPU one), REPEATS and LOOP_STEPS the alternations and the loop's length; NOISY_NAMES get NOISY_REPEATS
# (host-bound steps vary by several per cent between windows); SKIP_TESTS leaves the GPU tests out.
source "$(dirname "$0")/device_env.sh"
build_extension
if [ -z "${SKIP_TESTS:-}" ]; then
  step "pytest -m 'gpu or multigpu'"
  timeout 240 python3 -m pytest -m "gpu or multigpu" -v -rs 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -5
fi
step "plain loop"
timeout "${LOOP_S:-240}" python3 benchmarks/plain_loop.py "$OUT/plain_loop.json" --repeats "${REPEATS:-5}" \
  --loop-steps "${LOOP_STEPS:-20}" ${LOOP_NAMES:-$(python3 -c "from pygpuperf.workloads import WORKLOADS; print(' '.join(
    n for n in sorted(WORKLOADS) if n not in ('resnet18-train-small', 'gpt-tiny-train')))")} \
  2>&1 | grep -v "Warning\|warn(" | tee "$OUT/plain_loop.txt"
if [ -n "${NOISY_NAMES:-}" ]; then
  step "plain loop, host-bound steps"
  timeout 200 python3 benchmarks/plain_loop.py "$OUT/plain_loop_noisy.json" --repeats "${NOISY_REPEATS:-15}" \
    --loop-steps "${LOOP_STEPS:-20}" $NOISY_NAMES 2>&1 | grep -v "Warning\|warn(" | tee "$OUT/plain_loop_noisy.txt"
fi
step "done"
