#!/usr/bin/env bash
# Proposed first call of session 16, from branch exp/skinny (compiled for sm_80 and sm_90,
# never run on a GPU): the tensor-core matmul of 3..16 tokens with the LoRA shrink in the
# same launch (gemm_skinny.cu), switched on for every backend by QV_EXP_SKINNY=16. Tests,
# fixtures and verify with it on (test_cuda_groups has its own tests with the option set);
# then batch 4, 8 and 16, LoRA and base, interleaved with it off (cuBLAS + fork / join).
# Check the branch out before calling the device; carry [".deps"].
set -u
T0=$SECONDS
QV_EXP_SKINNY=16 TARGETS="test_cuda_groups test_cuda_graphs test_cuda_lora test_cuda_lora_delta" FIX=1 VERIFY=1 \
  OUT=$OUT/new timeout 330 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure|Expected|Which is" $OUT/new.txt | cut -c1-200 | head -30
echo "checks end at $((SECONDS - T0)) s"
mkdir -p /tmp/x_logs
B=(./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16)
run() {  # name bs VAR=VALUE
  local name=$1 bs=$2 var=$3
  [ $((SECONDS - T0)) -gt 520 ] && return
  env "$var" timeout 45 "${B[@]}" --batch-size $bs --input-len 128 --output-len 64 --num-adapters $bs --compare base \
    --num-iters 1 --max-num-seqs $bs --kv-cache-memory 16GiB >/tmp/x_logs/${name}_b$bs.log 2>&1
  echo "b$bs $name (LoRA, base): $(grep -E '^  decode ' /tmp/x_logs/${name}_b$bs.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ') at $((SECONDS - T0)) s"
}
for i in 1 2; do
  for bs in 8 4 16; do run cublas_$i $bs X=1; run skinny_$i $bs QV_EXP_SKINNY=16; done
done
tar czf $OUT/extra.tgz -C /tmp/x_logs . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
