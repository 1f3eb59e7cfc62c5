#!/usr/bin/env bash
# Session 13, call 2: the checkout (norm rows in registers, t of the deferred LoRA term in
# registers, rope's step inputs read before the wait; ablation switches still in, env-gated):
# GPU tests, fixtures, verify; then batch 1/8/32/64 LoRA vs base and batch-1 eager against
# c0aec88 (base), and (c) interleaved 2 rounds; then the no-delta ablation at 1 and 8.
set -u
T0=$SECONDS
ln -sfn .. build-trees/new
bash tools/gpu/prebuild_trees.sh "base:"
TARGETS="test_cuda_lora_delta test_cuda_ops test_cuda_graphs test_cuda_groups test_cuda_lora" FIX=1 VERIFY=1 OUT=$OUT/new timeout 300 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|^total|PASSED|FAILED|^build|error|: ok|Failure" $OUT/new.txt | grep -v "^--" | cut -c1-150 | head -40
echo "checks end at $((SECONDS - T0)) s"
while ! ls /tmp/built_base.* >/dev/null 2>&1; do sleep 2; done; ls /tmp/built_base.*
TREES="new base" NOTEST="new base" BS="1 8 32 64" EAGER=1 CINTER=2 OUT=$OUT/c timeout $((540 - (SECONDS - T0))) bash tools/gpu/compare_trees.sh > $OUT/c.txt 2>&1
tail -14 $OUT/c.txt
echo "compare end at $((SECONDS - T0)) s"
B=(./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16)
for bs in 1 8; do
  [ $((SECONDS - T0)) -gt 565 ] && break
  QV_ABL_NODELTA=1 timeout 20 "${B[@]}" --batch-size $bs --input-len 128 --output-len 64 --num-adapters $bs --compare base \
    --num-iters 1 --max-num-seqs $bs --kv-cache-memory 16GiB >/tmp/compare_logs/nodelta_b$bs.log 2>&1
  echo "b$bs nodelta (LoRA, base): $(grep -E '^  decode ' /tmp/compare_logs/nodelta_b$bs.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ')"
done
tar czf $OUT/extra.tgz -C /tmp/compare_logs . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
