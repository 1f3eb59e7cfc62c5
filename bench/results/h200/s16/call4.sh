#!/usr/bin/env bash
# Session 16, call 4, branch exp/skinny32: the skinny kernel with 32-token tiles (four n-tiles,
# 138 registers) for LoRA projections of 17..32 tokens, switched on by QV_EXP_SKINNY_LORA=32:
# test_cuda_groups (ProjectDecodeSkinny up to 33 tokens), then batch 32 and 24 against
# cuBLAS with the side-stream shrink, interleaved.
set -u
T0=$SECONDS
TARGETS="test_cuda_groups" OUT=$OUT/new timeout 300 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|FAIL|PASSED|FAILED|^build|error|Failure|Expected|Which is" $OUT/new.txt | cut -c1-200 | head -20
echo "checks end at $((SECONDS - T0)) s"
export BENCH_UNTIL=380; source tools/gpu/bench_switch.sh
for i in 1 2; do
  bench_switch cublas_$i 32 X=1; bench_switch skinny32_$i 32 QV_EXP_SKINNY_LORA=32
  bench_switch cublas_$i 24 X=1; bench_switch skinny32_$i 24 QV_EXP_SKINNY_LORA=32
done
tar czf $OUT/extra.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
