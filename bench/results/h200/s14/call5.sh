#!/usr/bin/env bash
# Session 14, call 5: f2fc7ec as committed (no switches): GPU tests and verify, then the issue 6
# numbers: batch 1 three times, batch-1 eager, batch 8 / 32 / 64, (c) once.
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_delta test_cuda_graphs" VERIFY=1 OUT=$OUT/new timeout 200 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/new.txt | cut -c1-150 | head -12
echo "checks end at $((SECONDS - T0)) s"
B=(./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16 --commit f2fc7ec)
mkdir -p /tmp/x_logs
run() {  # name bs extra-flags...
  local name=$1 bs=$2; shift 2
  [ $((SECONDS - T0)) -gt 300 ] && return
  timeout 45 "${B[@]}" --batch-size $bs --input-len 128 --output-len 64 --num-adapters $bs --compare base \
    --num-iters 1 --max-num-seqs $bs --kv-cache-memory 16GiB "$@" >/tmp/x_logs/${name}_b$bs.log 2>&1
  echo "b$bs $name (LoRA, base): $(grep -E '^  decode ' /tmp/x_logs/${name}_b$bs.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ') at $((SECONDS - T0)) s"
}
run g1 1; run g2 1; run g3 1; run eager 1 --enforce-eager; run g 8; run g 32; run g 64
[ $((SECONDS - T0)) -lt 270 ] && timeout 70 "${B[@]}" --batch-size 256 --input-len 256 --output-len 128 --num-adapters 64 --num-iters 1 \
  --warmup-steps 2 --kv-cache-memory 56GiB >/tmp/x_logs/c.log 2>&1; echo "(c): $(grep -E '^  end-to-end' /tmp/x_logs/c.log | tr -s ' ')"
tar czf $OUT/extra.tgz -C /tmp/x_logs . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
