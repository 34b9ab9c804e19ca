#!/usr/bin/env bash
# One call: build, the GPU tests, the main command as a user runs it (timed), the full variant search
# (its ceilings against the default's), and the fleet command on one GPU beside roofline --quick.
source "$(dirname "$0")/device_env.sh"
build_extension
step "pytest -m 'gpu or multigpu'"
timeout 150 python3 -m pytest -m "gpu or multigpu" -q -rs -x 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -3
step "main command (default)"
start=$(date +%s%N)
timeout 130 python3 -m pygpuperf.roofline --out "$OUT/default" >"$OUT/default_stdout.txt" 2>&1; echo "exit $?" >>"$OUT/default_stdout.txt"
echo "main command wall $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee -a "$log"
step "full search (no model)"
timeout 140 python3 -m pygpuperf.roofline --full --model none --out "$OUT/full" >"$OUT/full_stdout.txt" 2>&1; echo "exit $?" >>"$OUT/full_stdout.txt"
step "fleet, one GPU"
timeout 45 python3 -m pygpuperf.fleet --budget-s 30 --out "$OUT/fleet" >"$OUT/fleet_stdout.txt" 2>&1; echo "exit $?" >>"$OUT/fleet_stdout.txt"
step "roofline --quick (no model)"
timeout 35 python3 -m pygpuperf.roofline --quick --model none --out "$OUT/quick" >"$OUT/quick_stdout.txt" 2>&1; echo "exit $?" >>"$OUT/quick_stdout.txt"
for d in default full quick; do rm -rf "$OUT/$d/explain/"*.png 2>/dev/null; done
step "done"
