#!/usr/bin/env bash
# The explainer on a GPU machine, in two parts that each fit one call:
#   PART=ab  bash benchmarks/device_explain.sh   # default explain timed, GPU explain tests, three A/B pairs, batch sweep
#   PART=zoo bash benchmarks/device_explain.sh   # every registered workload explained (benchmarks/explain_zoo.py)
# MODEL names the results.json whose machine model the runs are held against.
source "$(dirname "$0")/device_env.sh"
MODEL="${MODEL:-benchmarks/results/nvidia-h200_2026-11-30_compute-transfers_results.json}"
work="$OUT/explain-$PART"
mkdir -p "$work"
step "build"
PYGPUPERF_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -e . >>"$log" 2>&1 || {
  echo "build failed"; tail -40 "$log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv >>"$log" 2>&1

explain=(python3 -m pygpuperf.explain resnet50-train-amp --machine-model "$MODEL")

if [ "$PART" = ab ] && [ "${SKIP_DEFAULT:-0}" = 0 ]; then
  step "default explain, quick probes included (goal < 2 min)"
  start=$(date +%s.%N)
  timeout 180 python3 -m pygpuperf.explain resnet50-train-amp --out "$work/default" >"$work/default.txt" 2>&1
  echo "default explain: rc $?, $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s wall" | tee -a "$log"
  step "pytest tests/test_gpu_explain.py"
  timeout 200 python3 -m pytest -v -s tests/test_gpu_explain.py 2>&1 | tail -30 >"$OUT/pytest_gpu_explain.txt"
fi
if [ "$PART" = ab ]; then
  for pair in "memory_format=nchw memory_format=channels_last" "batch_size=64 batch_size=256" \
              "cudnn_benchmark=off cudnn_benchmark=on"; do
    tag=$(echo "$pair" | cut -d= -f1)
    flags=(--cudnn-benchmark on); [ "$tag" = cudnn_benchmark ] && flags=()
    step "compare $pair"
    timeout 150 "${explain[@]}" "${flags[@]}" --out "$work/compare-$tag" --compare-config $pair >"$work/compare-$tag.txt" 2>&1 ||
      echo "compare $pair failed" | tee -a "$log"
  done
  step "batch sweep"
  timeout 150 "${explain[@]}" --cudnn-benchmark on --out "$work/batch-sweep" --batch-sweep 16,32,64,128,256,512 \
    >"$work/batch-sweep.txt" 2>&1 || echo "batch sweep failed" | tee -a "$log"
else
  step "zoo"
  timeout 500 python3 benchmarks/explain_zoo.py "$MODEL" "$work/zoo" --budget-s 400 2>&1 | tee "$work/zoo-stdout.txt" | grep -v "^\[W\|Warning\|warn"
  cp "$work/zoo/zoo.txt" "$OUT/zoo.txt" 2>/dev/null
fi
tar -czf "$OUT/explain-$PART.tar.gz" -C "$OUT" "explain-$PART" && rm -rf "$work"
step "done"
