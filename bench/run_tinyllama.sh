#!/usr/bin/env bash
# The TinyLlama-1.1B (bf16, dummy weights) measurements behind bench/RESULTS.md, issues 2, 4
# and 5. Pairs that are compared run back to back, and the whole list runs REPS times, so
# that load from other users of a shared machine hits both sides of a comparison alike.
#
#   bench/run_tinyllama.sh BUILD_DIR OUT_DIR [DEVICE] [THREADS] [REPS]
#   e.g. bench/run_tinyllama.sh build bench/results/cpu-2core cpu 2 2
#        bench/run_tinyllama.sh build bench/results/h200 cuda 0 2
# Writes OUT_DIR/<case>-<rep>.json (one `quiver bench --json-output` record each) and
# OUT_DIR/log.txt (the human tables).
set -euo pipefail
build=${1:?build dir}; out=${2:?output dir}; device=${3:-cpu}; threads=${4:-0}; reps=${5:-2}
mkdir -p "$out"
q="$build/quiver bench --model bench/configs/tinyllama-1.1b --load-format dummy --dtype bfloat16 --device $device --threads $threads"
run() {  # name, flags...
  local name=$1; shift
  echo "=== $name ($(date -u +%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$out/log.txt"
  $q "$@" --json-output "$out/$name.json" 2>&1 | tee -a "$out/log.txt"
}
for rep in $(seq 1 "$reps"); do
  # Issue 2 and 4a: batch-1 prefill (128-token prompt) and decode, without and with one r=16 adapter.
  run b1-base-$rep   --batch-size 1 --input-len 128 --output-len 128 --num-iters 2
  run b1-lora-$rep   --batch-size 1 --input-len 128 --output-len 128 --num-iters 2 --num-adapters 1 --lora-rank 16
  # 4b: 8 requests on the base model vs on 8 different adapters.
  run b8-base-$rep   --batch-size 8 --input-len 128 --output-len 64 --num-iters 2
  run b8-lora8-$rep  --batch-size 8 --input-len 128 --output-len 64 --num-iters 2 --num-adapters 8 --lora-rank 16
  # 4c: 4 requests over 4 adapters, batched vs adapter by adapter.
  run b4-lora4-batched-$rep    --batch-size 4 --input-len 128 --output-len 64 --num-iters 2 --num-adapters 4 --lora-rank 16
  run b4-lora4-sequential-$rep --batch-size 4 --input-len 128 --output-len 64 --num-iters 2 --num-adapters 4 --lora-rank 16 --sequential-adapters
  # Issue 5: 16 requests over 8 adapters, all at once and at 2 requests/s.
  run online-inf-$rep  --num-requests 16 --request-rate inf --input-len 128 --output-len 64 --num-adapters 8 --lora-rank 16
  run online-r2-$rep   --num-requests 16 --request-rate 2 --input-len 128 --output-len 64 --num-adapters 8 --lora-rank 16
done
