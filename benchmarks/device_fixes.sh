#!/usr/bin/env bash
# One call: build, then `explain --try-fixes` on built-in workloads and a held-out step, and the
# predicted-vs-measured table of every fix.
source "$(dirname "$0")/device_env.sh"
build_extension
MODEL="${MODEL:?results.json of this card}"
# torch.compile of a whole training step takes a minute or more: it is tried on the decode step only.
EAGER=tf32,cudnn_benchmark,fp16_accumulation,amp,channels_last,cuda_graphs,batch_size
for target in "resnet50-train-amp --memory-format nchw --try-fixes $EAGER" "bert-base-squad-train --try-fixes $EAGER" \
              "resnet50-train --try-fixes $EAGER" \
              "benchmarks/heldout/llm_decode.py:make_step --batch-size 1 --try-fixes cuda_graphs,compile,batch_size"; do
  name=$(echo "$target" | cut -d' ' -f1 | tr '/:.' '___')
  step "try-fixes $target"
  timeout "${FIX_S:-150}" python3 -m pygpuperf.explain $target --machine-model "$MODEL" \
    --out "$OUT/fixes/$name" >"$OUT/fixes_$name.txt" 2>&1 || echo "exit $? for $target" | tee -a "$log"
done
step "fix table"
python3 benchmarks/fix_table.py "$OUT/fix_table.json" "$OUT"/fixes/*/explain.json | tee "$OUT/fix_table.txt"
(cd "$OUT" && tar -czf fixes.tar.gz fixes && rm -rf fixes)
step "done"
