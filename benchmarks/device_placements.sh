#!/usr/bin/env bash
# One call: build; this card's machine model (the committed one on an H200, the main command's own elsewhere);
# UNet's batch fix twice with window pairs at several placements; the per-process placement check of its
# sensitive convolution; torch.compile's effect on the decode step's host. SKIP_* leave a part out.
source "$(dirname "$0")/device_env.sh"
[ -n "${SKIP_BUILD:-}" ] || build_extension
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card" | tee -a "$log"
if [[ "$card" == *H200* ]]; then
  MODEL=benchmarks/results/nvidia-h200_2026-12-01_machine-model_results.json
else  # another card: its own measured ceilings, from the main command as a user runs it
  time_main_command 150
  MODEL="$OUT/default_results.json"
fi
if [ -z "${SKIP_FIXES:-}" ]; then
  MODEL="$MODEL" SKIP_BUILD=1 SKIP_DEFAULT=1 SKIP_BF16=1 FIX_S=120 \
    TARGETS="unet-train --try-fixes batch_size;unet-train --steps 4 --try-fixes batch_size" \
    bash benchmarks/device_fixes.sh
fi
if [ -z "${SKIP_PROCESSES:-}" ]; then
  step "placement processes"
  tar -xzf benchmarks/results/nvidia-h200_2026-12-04_fixes55.tar.gz -C "$WORK" \
    fixes/unet-train_--try-fixes_batch_size/explain.json
  timeout 200 python3 benchmarks/placement_processes.py "$WORK/fixes/unet-train_--try-fixes_batch_size/explain.json" \
    "$OUT/placement_processes.json" --processes 8 --held 2 2>&1 | tee "$OUT/placement_processes.txt"
fi
if [ -z "${SKIP_COMPILE:-}" ]; then
  step "compile host"
  timeout 200 python3 benchmarks/compile_host.py "$OUT/compile_host.json" 2>&1 | grep -v "Warning\|warn(" |
    tee "$OUT/compile_host.txt"
fi
# What comes back from $OUT is a few files: the small ones travel in one archive.
(cd "$OUT" && tar -czf extras.tar.gz --ignore-failed-read placement_processes.* compile_host.* fix_table.json \
  default_* 2>/dev/null; rm -f placement_processes.* compile_host.* fix_table.json default_*)
step "done"
