#!/usr/bin/env bash
# The TinyLlama-1.1B (bf16, dummy weights) CPU measurements of bench/RESULTS.md (records
# bench/records/cpu-*.json): batch-1 decode and prefill, LoRA against the base model, online
# load. Comparisons (LoRA vs base, batched vs adapter by adapter) alternate A and B passes
# inside one process (--compare), so that load from other users of a shared machine hits
# both sides alike; each case waits (up to WAIT s) for the 1-minute load to drop below MAXLOAD.
#
#   bench/run_tinyllama.sh BUILD_DIR OUT_DIR [DEVICE] [THREADS] [MAXLOAD] [WAIT]
#   e.g. bench/run_tinyllama.sh build /tmp/bench-cpu cpu 2 1.5 900
#        bench/run_tinyllama.sh build /tmp/bench-cuda cuda 0 1000 0
# Writes OUT_DIR/<case>.json (one `quiver bench --json-output` record each) and
# OUT_DIR/log.txt (the human tables). CASES="b1-base online-r2" runs a subset;
# MODEL=bench/configs/llama-2-7b runs the same cases on another shape; COMMIT=abc1234 is
# recorded as the commit where the tree has no .git (a copy on another machine).
set -euo pipefail
build=${1:?build dir}; out=${2:?output dir}; device=${3:-cpu}; threads=${4:-0}
maxload=${5:-1.5}; wait_s=${6:-900}
mkdir -p "$out"
q="$build/quiver bench --model ${MODEL:-bench/configs/tinyllama-1.1b} --load-format dummy --dtype bfloat16 --device $device --threads $threads ${COMMIT:+--commit $COMMIT}"
run() {  # name, flags...
  local name=$1; shift
  if [[ -n "${CASES:-}" && " $CASES " != *" $name "* ]]; then return; fi
  local waited=0
  while awk -v m="$maxload" '{exit !($1 > m)}' /proc/loadavg && (( waited < wait_s )); do sleep 15; waited=$((waited + 15)); done
  echo "=== $name ($(date -u +%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg), waited ${waited}s)" | tee -a "$out/log.txt"
  $q "$@" --json-output "$out/$name.json" 2>&1 | tee -a "$out/log.txt"
}
# Batch-1 prefill of a 128-token prompt and decode, no LoRA.
run b1-base  --batch-size 1 --input-len 128 --output-len 128 --num-iters 3
# Batch 1 with one r=16 adapter on all 7 projections vs the base model.
run b1-lora1-vs-base  --batch-size 1 --input-len 128 --output-len 128 --num-iters 4 --num-adapters 1 --lora-rank 16 --compare base
# 8 requests on 8 different adapters vs 8 on the base model.
run b8-lora8-vs-base  --batch-size 8 --input-len 128 --output-len 64 --num-iters 4 --num-adapters 8 --lora-rank 16 --compare base
# 4 requests over 4 adapters, batched vs adapter by adapter.
run b4-lora4-vs-sequential  --batch-size 4 --input-len 128 --output-len 64 --num-iters 2 --num-adapters 4 --lora-rank 16 --compare sequential
# Online: 16 requests over 8 adapters, all at once and at 2 requests/s.
run online-inf  --num-requests 16 --request-rate inf --input-len 128 --output-len 64 --num-adapters 8 --lora-rank 16
run online-r2   --num-requests 16 --request-rate 2 --input-len 128 --output-len 64 --num-adapters 8 --lora-rank 16
# 2 req/s x 128 prompt tokens is more prefill than 2 CPU cores do (~100 tok/s): a rate the
# CPU sustains, for latencies without a queue.
run online-r0.5 --num-requests 16 --request-rate 0.5 --input-len 128 --output-len 64 --num-adapters 8 --lora-rank 16
# Chunked prefill at 256 tokens a step: long prefills stall decodes for less time each.
run online-r2-chunk256  --num-requests 16 --request-rate 2 --input-len 128 --output-len 64 --num-adapters 8 --lora-rank 16 --max-num-batched-tokens 256
