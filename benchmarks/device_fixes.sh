#!/usr/bin/env bash
# One call: build, the main command timed as a user runs it (its phases in results.json), then
# `explain --try-fixes` on built-in workloads (some in bad configurations) and a held-out step, the
# predicted-vs-measured table of every fix, and one bf16 profile.
source "$(dirname "$0")/device_env.sh"
[ -n "${SKIP_BUILD:-}" ] || build_extension
MODEL="${MODEL:?results.json of this card}"
[ -n "${SKIP_DEFAULT:-}" ] || time_main_command 120
# torch.compile of a whole training step takes a minute or more: it is tried on the decode step only.
EAGER=tf32,cudnn_benchmark,fp16_accumulation,amp,channels_last,cuda_graphs,batch_size
# TARGETS: ';'-separated targets instead of the list below.
DEFAULT_TARGETS=("resnet50-train-amp --memory-format nchw --try-fixes $EAGER" "bert-base-squad-train --try-fixes $EAGER"
              "resnet50-train --try-fixes $EAGER"
              "resnet50-train --memory-format nchw --tf32 off --try-fixes tf32,amp,channels_last,batch_size"
              "bert-base-squad-train --amp none --tf32 off --try-fixes tf32,amp,batch_size"
              "benchmarks/heldout/llm_decode.py:make_step --batch-size 1 --try-fixes cuda_graphs,compile,compile_reduce_overhead,batch_size")
# The configurations whose fixes were timed with the profiler's tracing library still attached (runs fixes2
# to fixes9, before try_fixes released it), in two calls of about 7 minutes: SET=stale-a or SET=stale-b.
STALE_A=("resnet50-train --try-fixes $EAGER" "bert-base-squad-train --try-fixes $EAGER"
         "resnet50-train --memory-format nchw --tf32 off --try-fixes tf32,amp,channels_last,batch_size"
         "bert-base-squad-train --amp none --tf32 off --try-fixes tf32,amp,batch_size"
         "resnet50-train-amp --memory-format nchw --try-fixes $EAGER" "gpt-100m-train --try-fixes $EAGER"
         "benchmarks/heldout/llm_decode.py:make_step --batch-size 1 --try-fixes cuda_graphs,compile,compile_reduce_overhead,batch_size")
STALE_B=("resnet50-infer --try-fixes $EAGER" "unet-train --try-fixes $EAGER" "resnet50-train-tf32 --try-fixes $EAGER"
         "retinanet-train --try-fixes $EAGER" "resnet101-infer --try-fixes $EAGER" "resnet101-infer-amp --try-fixes $EAGER"
         "resnet101-train-bf16 --try-fixes $EAGER" "resnet101-train-tf32 --try-fixes $EAGER")
# The configurations whose latest rows carry the most noise (timed before pairing, or on a host-slowed card).
REFRESH=("benchmarks/heldout/llm_decode.py:make_step --batch-size 1 --try-fixes cuda_graphs,compile,compile_reduce_overhead,batch_size"
         "resnet101-train-amp --try-fixes $EAGER" "bert-base-squad-train --try-fixes $EAGER")
case "${SET:-}" in
  stale-a) DEFAULT_TARGETS=("${STALE_A[@]}") ;;
  stale-b) DEFAULT_TARGETS=("${STALE_B[@]}") ;;
  refresh) DEFAULT_TARGETS=("${REFRESH[@]}") ;;
esac
if [ -n "${TARGETS:-}" ]; then IFS=';' read -r -a CHOSEN <<<"$TARGETS"; else CHOSEN=("${DEFAULT_TARGETS[@]}"); fi
for target in "${CHOSEN[@]}"; do
  [ -n "${ONLY:-}" ] && ! echo "$target" | grep -qE -- "$ONLY" && continue  # ONLY: a regex choosing targets
  name=$(echo "$target" | cut -d' ' -f1-6 | tr '/:. ,' '_____' | cut -c1-60)
  step "try-fixes $target"
  mkdir -p "$OUT/fixes/$name"  # its output goes in the archive: what comes back from $OUT is a few files
  timeout "${FIX_S:-100}" python3 -m pygpuperf.explain $target --machine-model "$MODEL" \
    --out "$OUT/fixes/$name" >"$WORK/stdout.txt" 2>&1 || echo "exit $? for $target" | tee -a "$log"
  mv "$WORK/stdout.txt" "$OUT/fixes/$name/stdout.txt"
  rm -f "$OUT/fixes/$name/"*.png "$OUT/fixes/$name/"*.svg "$OUT/fixes/$name/.pygpuperf.lock"
done
if [ -z "${SKIP_BF16:-}" ]; then
  step "bf16 profile"
  timeout 60 python3 -m pygpuperf.explain resnet50-train-bf16 --machine-model "$MODEL" --out "$WORK/bf16" >"$OUT/bf16_stdout.txt" 2>&1
  cp "$WORK/bf16"/explain.json "$OUT/bf16_explain.json" 2>/dev/null
fi
step "fix table"
python3 benchmarks/fix_table.py "$OUT/fix_table.json" "$OUT"/fixes/*/explain.json | tee "$OUT/fix_table.txt"
(cd "$OUT" && tar -czf fixes.tar.gz fixes && rm -rf fixes)
step "done"
