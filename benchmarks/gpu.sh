#!/usr/bin/env bash
# The GPU side of the project, on a machine with a CUDA GPU, from the repository root:
#
#   bash benchmarks/gpu.sh STAGE [OUT]
#
#   build      install the extension, built for this machine's GPU, into this Python
#   test       the GPU tests: pytest -m "gpu or multigpu"
#   roofline   the main command, its results in OUT
#   reference  explain every reference configuration with --try-fixes into OUT/fixes, against OUT's
#              results.json, then compact OUT into benchmarks/reference/ (benchmarks/reference.py add)
#   all        the four in order, stopping at the first that fails
#
# OUT (the argument, else $OUT, else ./gpu-out) takes the raw outputs and one log per stage; never commit it.
# Environment: PYTHON (default python3), or VENV, a folder that build makes into a venv; MODEL, the
# results.json the reference configurations are explained against (default OUT/results.json); CARD, the name
# reference.py files the run under (default this GPU's, e.g. nvidia-h100-80gb-hbm3); CONFIGS, "cross" for the
# six configurations measured on every card, or a regex over a configuration's arguments; DRY_RUN=1 prints
# each command without running it.
set -uo pipefail

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in
  build | test | roofline | reference | all) stage=$1 ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
[ $# -le 2 ] || { usage >&2; exit 2; }
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
OUT=$(absolute "${2:-${OUT:-gpu-out}}")
PY=${PYTHON:-python3}
[ -z "${VENV:-}" ] || { VENV=$(absolute "$VENV"); PY=$VENV/bin/python; }
DRY_RUN=${DRY_RUN:-}
cd "$(dirname "$0")/.." || exit 1

# Print a command (quoted where the shell needs it), then run it, its output kept in the stage's log as it comes.
run() {
  local line=+ arg q="'"
  for arg in "$@"; do
    if [[ -n $arg && $arg != *[^A-Za-z0-9_./:,=+@%-]* ]]; then line+=" $arg"; else line+=" $q${arg//$q/$q\\$q$q}$q"; fi
  done
  if [ -n "$DRY_RUN" ]; then echo "$line"; return 0; fi
  echo "$line" | tee -a "$LOG"
  "$@" 2>&1 | tee -a "$LOG"
}

stage_build() {
  if [ -n "${VENV:-}" ] && [ ! -x "$PY" ]; then
    # The system's site packages keep the torch installed there (a CUDA build) rather than fetching another.
    run python3 -m venv --system-site-packages "$VENV" || return
  fi
  # nvcc from the toolkit's default place where it is not on PATH.
  command -v nvcc >/dev/null || [ ! -d /usr/local/cuda/bin ] || PATH=/usr/local/cuda/bin:$PATH
  run "$PY" -c 'import torch; assert torch.cuda.is_available(), "torch sees no CUDA GPU"
print("torch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name())' || return
  # --no-build-isolation: the extension compiles against the torch above, so the build tools must be here.
  run "$PY" -m pip install "scikit-build-core>=0.10" ninja pytest || return
  # torch's requirement is met, so pip keeps it; offline, PIP_NO_DEPS=1 (pip's own) skips the requirements.
  run env PYGPUPERF_CUDA=ON "$PY" -m pip install --no-build-isolation -e . || return
  run nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
}

stage_test() { run "$PY" -m pytest -m "gpu or multigpu" -q -rs -p no:cacheprovider; }

stage_roofline() { run "$PY" -m pygpuperf.roofline --out "$OUT" --overwrite; }

# torch.compile of a whole training step takes minutes: it is tried on the decode step only.
EAGER=tf32,cudnn_benchmark,fp16_accumulation,amp,channels_last,cuda_graphs,batch_size
# Measured on every card, with the fixes whose predictions the cards are compared by.
CROSS_CARD=("dcgan-train --try-fixes batch_size" "gpt-100m-train --try-fixes amp"
  "gpt-tiny-train --try-fixes batch_size" "resnet50-train --try-fixes batch_size"
  "resnet50-train-tf32 --try-fixes cuda_graphs,batch_size" "unet-train --try-fixes cuda_graphs,batch_size")
# The rest of the zoo, four steps in a configuration a fix mends, and the held-out decode step.
REST=("bert-base-squad-train --try-fixes $EAGER"
  "bert-base-squad-train --amp none --tf32 off --try-fixes tf32,amp,batch_size"
  "gpt-100m-train --amp fp16 --try-fixes amp"
  "resnet50-train-amp --try-fixes $EAGER" "resnet50-train-amp --memory-format nchw --try-fixes $EAGER"
  "resnet50-train --memory-format nchw --tf32 off --try-fixes tf32,amp,channels_last,batch_size"
  "resnet50-train-bf16 --try-fixes $EAGER" "resnet50-infer --try-fixes $EAGER" "resnet50-infer-amp --try-fixes $EAGER"
  "resnet101-train --try-fixes $EAGER" "resnet101-train-amp --try-fixes $EAGER"
  "resnet101-train-bf16 --try-fixes $EAGER" "resnet101-train-tf32 --try-fixes $EAGER"
  "resnet101-infer --try-fixes $EAGER" "resnet101-infer-amp --try-fixes $EAGER" "retinanet-train --try-fixes $EAGER"
  "benchmarks/heldout/llm_decode.py:make_step --batch-size 1 \
--try-fixes cuda_graphs,compile,compile_reduce_overhead,batch_size")

chosen() {
  case "${CONFIGS:-}" in
    "") return 0 ;;
    cross) printf '%s\n' "${CROSS_CARD[@]}" | grep -qxF -- "$1" ;;
    *) [[ $1 =~ $CONFIGS ]] ;;
  esac
}

# A configuration's folder is named by its arguments, as fix_table.py and reference.py read it back.
folder() { echo "$1" | cut -d' ' -f1-6 | tr '/:. ,' '_____' | cut -c1-60; }

stage_reference() {
  local model=${MODEL:-$OUT/results.json} card=${CARD:-} failed=0 count=0 config
  if [ -z "$DRY_RUN" ]; then
    [ -f "$model" ] || { echo "no machine model at $model: run the roofline stage first, or set MODEL" >&2; return 1; }
    [ -n "$card" ] || card=$("$PY" -c 'import torch; from pygpuperf.facts.device import device_slug
print(device_slug(torch.device("cuda")))') || return
  fi
  for config in "${CROSS_CARD[@]}" "${REST[@]}"; do
    chosen "$config" || continue
    count=$((count + 1))
    # $config unquoted: it is the explain command's arguments. One failing leaves the others to run.
    run "$PY" -m pygpuperf.explain $config --machine-model "$model" --out "$OUT/fixes/$(folder "$config")" \
      --overwrite || failed=1
  done
  [ "$count" -gt 0 ] || { echo "CONFIGS=$CONFIGS selects no configuration" >&2; return 1; }
  run "$PY" benchmarks/reference.py add --card "${card:-CARD}" "$OUT" || failed=1
  return "$failed"
}

[ -n "$DRY_RUN" ] || mkdir -p "$OUT" || exit 1
case "$stage" in all) stages=(build test roofline reference) ;; *) stages=("$stage") ;; esac
for s in "${stages[@]}"; do
  LOG=$OUT/$s.log
  echo "=== $s ($(date -u +%H:%M:%S) UTC)"
  "stage_$s" || { echo "=== $s failed" >&2; exit 1; }
done
