#!/usr/bin/env bash
# Session 15, call 6, branch exp/silu4: silu's delta kernel with a float4 a thread
# (QV_EXP_SILU4=1: four outputs' B rows per member before the wait, t loaded once, 168
# registers) against main's one element a thread, same binary; the GPU test with it on.
set -u
T0=$SECONDS
TARGETS=test_cuda_lora_delta OUT=$OUT/new timeout 200 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "^build|error" $OUT/new.txt | head -4
QV_EXP_SILU4=1 timeout 60 ./build-gpu/test_cuda_lora_delta > $OUT/silu4_test.log 2>&1
echo "silu4 test_cuda_lora_delta rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/silu4_test.log | tr '\n' ' ')"
grep -E "Failure|Expected|Which is" $OUT/silu4_test.log | head -6
mkdir -p /tmp/x_logs
B=(./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16)
run() {  # name bs VAR=VALUE
  local name=$1 bs=$2 var=$3
  [ $((SECONDS - T0)) -gt 270 ] && return
  env "$var" timeout 45 "${B[@]}" --batch-size $bs --input-len 128 --output-len 64 --num-adapters $bs --compare base \
    --num-iters 1 --max-num-seqs $bs --kv-cache-memory 16GiB >/tmp/x_logs/${name}_b$bs.log 2>&1
  echo "b$bs $name (LoRA, base): $(grep -E '^  decode ' /tmp/x_logs/${name}_b$bs.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ') at $((SECONDS - T0)) s"
}
for i in 1 2; do run main_$i 8 X=1; run silu4_$i 8 QV_EXP_SILU4=1; done
run main 32 X=1; run silu4 32 QV_EXP_SILU4=1
run main 64 X=1; run silu4 64 QV_EXP_SILU4=1
tar czf $OUT/extra.tgz -C /tmp/x_logs . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
