#!/usr/bin/env bash
# One call: build, the GPU tests, the fixed-cost probes again (latency.kernel.*), and the profiles the
# kernel-time model's validation prices from (training and inference, AMP and FP32/TF32, both layouts,
# BERT-base, a held-out LLM decode step). MODEL names the results.json the profiles are explained against.
source "$(dirname "$0")/device_env.sh"
MODEL="${MODEL:?results.json of this card}"
build_extension
step "pytest -m 'gpu or multigpu'"
timeout 300 python3 -m pytest -m "gpu or multigpu" -v -rs 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -5
step "latency.kernel probes"
timeout 90 python3 -m pygpuperf.roofline --model none --out "$OUT/latency" --probes latency.kernel.duration \
  latency.kernel.back_to_back latency.kernel.graph latency.kernel.launch latency.kernel.single >"$OUT/latency.txt" 2>&1
cp "$OUT/latency/results.json" "$OUT/latency_results.json"; rm -rf "$OUT/latency"
step "profiles"
work="$OUT/profiles"
timeout 330 python3 benchmarks/kernel_model_data.py "$MODEL" "$work" \
  "resnet50-train-amp+cudnn_benchmark=on:256" "resnet50-train-amp+memory_format=nchw,cudnn_benchmark=on:256" \
  "resnet50-train+memory_format=nchw,cudnn_benchmark=on:256" "resnet50-infer-amp+cudnn_benchmark=on:256" \
  "resnet50-infer+cudnn_benchmark=on:256" "bert-base-squad-train:32" "bert-base-squad-train+amp=none:32" \
  "benchmarks/heldout/llm_decode.py:make_step:1,16" 2>&1 | grep -v "Warning\|warn(" | tee "$OUT/profiles.txt"
tar -czf "$OUT/profiles.tar.gz" -C "$OUT" profiles && rm -rf "$work"
step "done"
