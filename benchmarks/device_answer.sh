#!/usr/bin/env bash
# One call: build, the GPU tests, the energy telemetry check, the main command as a user runs it (timed,
# with its phases in results.json), and the full variant search (its ceilings against the default's).
source "$(dirname "$0")/device_env.sh"
build_extension
step "pytest -m 'gpu or multigpu'"
timeout 170 python3 -m pytest -m "gpu or multigpu" -q -rs -x -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -3
step "start-up costs"
for what in "import torch" "import torch; torch.zeros(1, device='cuda')" "import pygpuperf.cli.roofline"; do
  /usr/bin/time -f "%e s: $what" python3 -c "$what" 2>&1 | tail -1 | tee -a "$log"
done
step "energy check"
timeout 40 python3 benchmarks/energy_check.py 2>&1 | grep -v Warn | tee "$OUT/energy_check.txt"
time_main_command 130
step "full search (no model)"
timeout "${FULL_S:-175}" python3 -m pygpuperf.roofline --full --model none --out "$WORK/full" >"$OUT/full_stdout.txt" 2>&1; echo "exit $?" >>"$OUT/full_stdout.txt"
cp "$WORK/full"/results.json "$OUT/full_results.json" 2>/dev/null
step "done"
