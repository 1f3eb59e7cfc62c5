#!/usr/bin/env bash
# Session 15, call 3: main with the shared-memory delta norm for 1-2 rows and the 2-token
# GEMV without spills (the working tree), against df65876 (build-trees/base, built beside it):
# GPU tests, every HF fixture, verify; then batch 1 and 2 interleaved with df65876, and the
# issue 6 numbers (batch 1 eager, 8, 32, 64, (c)). Prepare here:
#   rm -rf build-trees && mkdir -p build-trees/base && git archive df65876 | tar -x -C build-trees/base \
#     --exclude=models --exclude='tests/fixtures/*' --exclude=bench/results --exclude=tests/tokenizer_data
# and call with carry [".deps", "build-trees"].
set -u
T0=$SECONDS
bash tools/gpu/prebuild_trees.sh "base:"
TARGETS="test_cuda_lora_delta test_cuda_graphs test_cuda_lora test_cuda_groups test_cuda_ops" FIX=1 VERIFY=1 OUT=$OUT/new \
  timeout 330 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/new.txt | cut -c1-150 | head -30
echo "checks end at $((SECONDS - T0)) s"
while ! ls /tmp/built_base.* >/dev/null 2>&1; do sleep 2; done
ls /tmp/built_base.*
mkdir -p /tmp/x_logs
run() {  # name bs binary [bench flags...]
  local name=$1 bs=$2 bin=$3; shift 3
  [ $((SECONDS - T0)) -gt 540 ] && return
  timeout 45 $bin bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 \
    --lora-dtype bfloat16 --batch-size $bs --input-len 128 --output-len 64 --num-adapters $bs --compare base \
    --num-iters 1 --max-num-seqs $bs --kv-cache-memory 16GiB "$@" >/tmp/x_logs/${name}_b$bs.log 2>&1
  echo "b$bs $name (LoRA, base): $(grep -E '^  decode ' /tmp/x_logs/${name}_b$bs.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ') at $((SECONDS - T0)) s"
}
NEW=./build-gpu/quiver OLD=build-trees/base/build-gpu/quiver
for i in 1 2 3; do run new_$i 1 $NEW; run old_$i 1 $OLD; done
for i in 1 2; do run new_$i 2 $NEW; run old_$i 2 $OLD; done
run new_eager 1 $NEW --enforce-eager
run new_1 8 $NEW; run new_2 8 $NEW; run new 32 $NEW; run new 64 $NEW
[ $((SECONDS - T0)) -lt 520 ] && timeout 70 $NEW bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 \
  --device cuda --lora-rank 16 --lora-dtype bfloat16 --batch-size 256 --input-len 256 --output-len 128 --num-adapters 64 \
  --num-iters 1 --warmup-steps 2 --kv-cache-memory 56GiB >/tmp/x_logs/c.log 2>&1
echo "(c): $(grep -E '^  end-to-end' /tmp/x_logs/c.log | tr -s ' ')"
cp /tmp/prebuild_base.log /tmp/x_logs/ 2>/dev/null
tar czf $OUT/extra.tgz -C /tmp/x_logs . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
