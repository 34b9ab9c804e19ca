# Sourced by the device scripts: repo root, $OUT and its log, CUDA on PATH, carried wheels, step().
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-$PWD/device-out}"
mkdir -p "$OUT"
log="$OUT/device_log.txt"
export PYTHONUNBUFFERED=1 CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export PATH="$CUDA_HOME/bin:$PATH"

# Scratch space for runs whose folders are too many files to send back whole.
WORK="${WORK:-$(mktemp -d)}"

step() { echo "=== $* ($(date -u +%H:%M:%S))" | tee -a "$log"; }

# Wheels missing from the machine's image travel in .whl/.
if compgen -G ".whl/*.whl" >/dev/null; then
  step "carried wheels"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" .whl/*.whl \
    >>"$log" 2>&1 && export PYTHONPATH="$WORK/site"${PYTHONPATH:+:$PYTHONPATH}
fi

# The extension, built for this machine's GPU (the log keeps the compiler's output).
build_extension() {
  step "build"
  PYGPUPERF_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -e . >>"$log" 2>&1 || {
    echo "build failed"; tail -40 "$log"; exit 1; }
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv >>"$log" 2>&1
}

# The main command as a user runs it, timed, with its phases (results.json's meta) in the log.
time_main_command() {
  step "main command (default)"
  local start; start=$(date +%s%N)
  timeout "${1:-130}" python3 -m pygpuperf.roofline --out "$WORK/default" >"$OUT/default_stdout.txt" 2>&1
  echo "exit $?" >>"$OUT/default_stdout.txt"
  echo "main command wall $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee -a "$log"
  [ -f "$WORK/default/results.json" ] || { echo "main command wrote no results.json" | tee -a "$log"; return; }
  cp "$WORK/default"/results.json "$OUT/default_results.json"
  python3 -c "import json; m=json.load(open('$WORK/default/results.json'))['meta']; print('suite_seconds', m.get('suite_seconds'), 'phases', m.get('phase_seconds'))" | tee -a "$log"
}
