#!/usr/bin/env bash
# The H200 steps explained with --try-fixes kept under results/ (the latest run of each workload
# configuration), explained again by the current code: the predicted-vs-measured table of every fix (the
# measurements are as recorded) and the named-cause coverage of every step.
#   bash benchmarks/recorded_steps.sh OUTDIR   ->  OUTDIR/fix_table.{json,txt}, OUTDIR/cause_coverage.{json,txt}
set -euo pipefail
cd "$(dirname "$0")/.."
R=benchmarks/results/nvidia-h200
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The runs in order. The fix table takes each fix from the latest run that measured it on the configuration
# (and lists the fixes measured in more than one run); the cause coverage takes each configuration's latest
# profile. fixes10 is left out: its profiles lost the op calls of their kernels (see NOTES, 2026-12-01,
# late). Runs before fixes11 timed their fixes with the tracing library attached.
runs=(2026-12-01_fixes2 2026-12-01_fixes4 2026-12-01_fixes5 2026-12-01_fixes6 2026-12-01_fixes7 2026-12-01_fixes8
      2026-12-01_fixes9 2026-12-01_fixes11 2026-12-01_fixes12 2026-12-01_fixes13 2026-12-01_fixes14 2026-12-01_fixes15
      2026-12-02_fixes16 2026-12-02_fixes17 2026-12-02_fixes18 2026-12-02_fixes19 2026-12-02_fixes20 2026-12-02_fixes21 2026-12-02_fixes22
      2026-12-02_fixes23 2026-12-02_fixes24 2026-12-02_fixes25
      2026-12-02_fixes26 2026-12-02_fixes27 2026-12-02_fixes28
      2026-12-03_fixes29 2026-12-03_fixes30 2026-12-03_fixes31 2026-12-03_fixes32 2026-12-03_fixes33 2026-12-03_fixes34
      2026-12-03_fixes35 2026-12-03_fixes36 2026-12-03_fixes37 2026-12-03_fixes38
      2026-12-04_fixes39 2026-12-04_fixes40 2026-12-04_fixes41 2026-12-04_fixes42 2026-12-04_fixes43 2026-12-04_fixes44
      2026-12-04_fixes45 2026-12-04_fixes46 2026-12-04_fixes47 2026-12-04_fixes48
      2026-12-04_fixes49 2026-12-04_fixes50 2026-12-04_fixes51 2026-12-04_fixes52 2026-12-04_fixes53 2026-12-04_fixes54 2026-12-04_fixes55
      2026-12-07_fixes56 2026-12-07_fixes57)
# From fixes16 on, each fix was timed in windows alternating with the step as given.
declare -A config
profiles=()
for run in "${runs[@]}"; do
  mkdir -p "$work/${run#*_}" && tar -xzf "${R}_$run.tar.gz" -C "$work/${run#*_}"
  while IFS= read -r p; do
    profiles+=("$p")
    folder=$(basename "$(dirname "$p")")
    key="${folder%%_--try-fixes*}"
    # --steps N: the same configuration
    [[ $key =~ ^(.*)_--steps_[0-9]+(.*)$ ]] && key="${BASH_REMATCH[1]}${BASH_REMATCH[2]}"
    config["$key"]="$p"
  done < <(find "$work/${run#*_}" -path "*/fixes/*/explain.json" | sort)
done
steps=()
while IFS= read -r key; do steps+=("${config[$key]}"); done < <(printf '%s\n' "${!config[@]}" | sort)
out="${1:?OUTDIR}"
mkdir -p "$out"
python3 benchmarks/fix_table.py "$out/fix_table.json" "${profiles[@]}" --machine-model "${R}_2026-12-01_machine-model_results.json" \
  >"$out/fix_table.txt"
python3 benchmarks/cause_coverage.py "$out/cause_coverage.json" "${steps[@]}" \
  --machine-model "${R}_2026-12-01_machine-model_results.json" >"$out/cause_coverage.txt"
tail -1 "$out/fix_table.txt"
tail -1 "$out/cause_coverage.txt"
