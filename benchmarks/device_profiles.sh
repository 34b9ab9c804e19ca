#!/usr/bin/env bash
# One call: build, the GPU tests (unless SKIP_TESTS), and profiles of the configurations in PROFILES
# (kernel_model_data.py's NAME[+knob=value,...]:BS,BS,... specs, space-separated), explained against
# MODEL's machine model; they come back as profiles.tar.gz.
source "$(dirname "$0")/device_env.sh"
MODEL="${MODEL:?results.json of this card}"
build_extension
if [ -z "${SKIP_TESTS:-}" ]; then
  step "pytest -m 'gpu or multigpu'"
  timeout 250 python3 -m pytest -m "gpu or multigpu" -q -rs -p no:cacheprovider >"$OUT/pytest_gpu.txt" 2>&1
  tail -3 "$OUT/pytest_gpu.txt" | tee -a "$log"
fi
step "profiles"
timeout "${PROFILE_S:-300}" python3 benchmarks/kernel_model_data.py "$MODEL" "$OUT/profiles" ${PROFILES:?} 2>&1 |
  grep -v "Warning\|warn(" | tee "$OUT/profiles.txt"
tar -czf "$OUT/profiles.tar.gz" -C "$OUT" profiles && rm -rf "$OUT/profiles"
step "done"
