#!/usr/bin/env bash
# Session 13, call 4: the checkout (b213730 + norm weights before the wait, the delta norm's
# rows in registers with LoraDeltaRow4, rope's t loaded once; silu_mul_delta4 of call 3
# dropped): GPU tests and verify; batch 1/8/32/64 and batch-1 eager against b213730 (base),
# (c) one interleaved round; then at batch 1 and 8 two temporary switches (not committed):
# QV_ABL_NODELTA (consumers skip the term), QV_EXP_NORMSPLIT (the o / down terms as a kernel of
# their own before a plain add_rms_norm).
set -u
T0=$SECONDS
ln -sfn .. build-trees/new
bash tools/gpu/prebuild_trees.sh "base:"
TARGETS="test_cuda_lora_delta test_cuda_ops test_cuda_graphs" VERIFY=1 OUT=$OUT/new timeout 240 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/new.txt | cut -c1-150 | head -20
echo "checks end at $((SECONDS - T0)) s"
while ! ls /tmp/built_base.* >/dev/null 2>&1; do sleep 2; done; ls /tmp/built_base.*
TREES="new base" NOTEST="new base" BS="1 8 32 64" EAGER=1 CINTER=1 OUT=$OUT/c timeout $((400 - (SECONDS - T0))) bash tools/gpu/compare_trees.sh > $OUT/c.txt 2>&1
tail -11 $OUT/c.txt
echo "compare end at $((SECONDS - T0)) s"
B=(./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16)
for bs in 1 8; do
  for sw in QV_ABL_NODELTA QV_EXP_NORMSPLIT; do
    [ $((SECONDS - T0)) -gt 450 ] && break
    env $sw=1 timeout 20 "${B[@]}" --batch-size $bs --input-len 128 --output-len 64 --num-adapters $bs --compare base \
      --num-iters 1 --max-num-seqs $bs --kv-cache-memory 16GiB >/tmp/compare_logs/${sw}_b$bs.log 2>&1
    echo "b$bs $sw (LoRA, base): $(grep -E '^  decode ' /tmp/compare_logs/${sw}_b$bs.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ')"
  done
done
tar czf $OUT/extra.tgz -C /tmp/compare_logs . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
