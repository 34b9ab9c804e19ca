#!/usr/bin/env bash
# Data for the kernel-time model's checks, in one call: profiles at several batch sizes and Nsight
# Compute counters of one ResNet-50 and one transformer step. MODEL names the results.json whose
# machine model the profiles are explained against.
source "$(dirname "$0")/device_env.sh"
MODEL="${MODEL:?results.json of this card}"
build_extension
work="$OUT/kernel-model"
mkdir -p "$work"
metrics=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum
for run in "resnet50-train-amp 256" "gpt-100m-train 16"; do
  set -- $run
  step "ncu $1 batch $2"
  timeout 200 ncu --profile-from-start off --clock-control none --cache-control none --metrics "$metrics" --csv \
    --log-file "$work/ncu_$1_bs$2.csv" python3 benchmarks/ncu_step.py "$1" "$2" >"$work/ncu_$1_bs$2.txt" 2>&1 ||
    echo "ncu $1 failed: $(tail -3 "$work/ncu_$1_bs$2.txt")" | tee -a "$log"
done
step "profiles"
timeout 330 python3 benchmarks/kernel_model_data.py "$MODEL" "$work/runs" \
  resnet50-train-amp:256,32,64,128,512,1 gpt-100m-train:16,8,32,1 2>&1 | grep -v "Warning\|warn(" | tee "$work/runs.txt"
tar -czf "$OUT/kernel-model.tar.gz" -C "$OUT" kernel-model && rm -rf "$work"
step "done"
