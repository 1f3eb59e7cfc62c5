#!/usr/bin/env bash
# Session 13, call 3: the checkout (b213730 + norm weights before the wait and the delta
# norm's rows kept in registers, LoraDeltaRow4, rope's t loaded once, silu_mul_delta4):
# GPU tests, fixtures, verify; then batch 1/8/32/64 LoRA vs base and batch-1 eager against
# b213730 (base), and (c) interleaved 2 rounds.
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
tar czf $OUT/extra.tgz -C /tmp/compare_logs . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
