#!/usr/bin/env bash
# The H200 steps explained with --try-fixes kept under results/ (the latest run of each workload
# configuration), explained again by the current code: the predicted-vs-measured table of every fix (the
# measurements are as recorded) and the named-cause coverage of every step.
#   bash benchmarks/recorded_steps.sh OUTDIR   ->  OUTDIR/fix_table.{json,txt}, OUTDIR/cause_coverage.{json,txt}
set -euo pipefail
cd "$(dirname "$0")/.."
R=benchmarks/results/nvidia-h200_2026-12-01
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for run in fixes2 fixes4 fixes5 fixes6 fixes7 fixes8; do
  mkdir -p "$work/$run" && tar -xzf "${R}_$run.tar.gz" -C "$work/$run"
done
profiles=()
add() { for p in "$@"; do if [ -f "$p" ]; then profiles+=("$p"); fi; done; }
# fixes4 re-ran two of fixes2's configurations (with the baseline timed again), fixes8 three of fixes7's.
add "$work"/fixes2/*/fixes/{resnet50-train_--try-fixes,bert-base-squad-train_--try-fixes,resnet50-train_--memory-format_nchw,benchmarks_heldout}*/explain.json
add "$work"/fixes4/*/fixes/*/explain.json "$work"/fixes5/fixes/*/explain.json "$work"/fixes6/fixes/*/explain.json
for p in "$work"/fixes7/fixes/*/explain.json; do
  case "$p" in *resnet50-train-amp_--try*|*resnet50-train-bf16_*|*resnet50-infer-amp_*) ;; *) add "$p" ;; esac
done
add "$work"/fixes8/fixes/*/explain.json
out="${1:?OUTDIR}"
mkdir -p "$out"
python3 benchmarks/fix_table.py "$out/fix_table.json" "${profiles[@]}" --machine-model "${R}_machine-model_results.json" \
  >"$out/fix_table.txt"
python3 benchmarks/cause_coverage.py "$out/cause_coverage.json" "${profiles[@]}" \
  --machine-model "${R}_machine-model_results.json" >"$out/cause_coverage.txt"
tail -1 "$out/fix_table.txt"
tail -1 "$out/cause_coverage.txt"
