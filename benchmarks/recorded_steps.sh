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
# The runs in order; a configuration run again later (the same folder name) is taken from its latest run.
# fixes10 is left out: its profiles lost the op calls of their kernels (see NOTES, 2026-12-01, late).
runs=(fixes2 fixes4 fixes5 fixes6 fixes7 fixes8 fixes9 fixes11)
declare -A latest
for run in "${runs[@]}"; do
  mkdir -p "$work/$run" && tar -xzf "${R}_$run.tar.gz" -C "$work/$run"
  while IFS= read -r p; do
    latest["$(basename "$(dirname "$p")")"]="$p"
  done < <(find "$work/$run" -path "*/fixes/*/explain.json" | sort)
done
profiles=()
while IFS= read -r name; do profiles+=("${latest[$name]}"); done < <(printf '%s\n' "${!latest[@]}" | sort)
out="${1:?OUTDIR}"
mkdir -p "$out"
python3 benchmarks/fix_table.py "$out/fix_table.json" "${profiles[@]}" --machine-model "${R}_machine-model_results.json" \
  >"$out/fix_table.txt"
python3 benchmarks/cause_coverage.py "$out/cause_coverage.json" "${profiles[@]}" \
  --machine-model "${R}_machine-model_results.json" >"$out/cause_coverage.txt"
tail -1 "$out/fix_table.txt"
tail -1 "$out/cause_coverage.txt"
