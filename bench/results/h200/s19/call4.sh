#!/usr/bin/env bash
# Session 19, call 4, branch next/handles: main with the CudaBackend constructor's two
# cuBLAS handles set up by one local helper (session 18's review). The GPU checks it needs
# to land (five GPU test binaries, every HF fixture, verify), then ncu with detail metrics
# on the consumers' delta kernels and the token shrink at 32 tokens (the next session's
# target: their terms run at about 2x their bytes), and one batch-32 run for drift.
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_delta test_cuda_graphs test_cuda_lora test_cuda_groups test_cuda_ops" FIX=1 VERIFY=1 \
  OUT=$OUT/checks timeout 300 bash tools/gpu/run_checks.sh > $OUT/checks.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/checks.txt | cut -c1-150 | head -30
echo "checks end at $((SECONDS - T0)) s"
NCU=1 NCU_DETAIL=1 NCU_BS=32 NCU_IN=1 NCU_COUNT=10 NCU_SKIP=8 NCU_T=150 NCU_KERNELS='delta|rope_kv|token_shrink' \
  OUT=$OUT/ncu timeout 170 bash tools/gpu/run_checks.sh > $OUT/ncu.txt 2>&1
grep -vE "^\s*$" $OUT/ncu.txt | cut -c1-160 | head -150
echo "ncu end at $((SECONDS - T0)) s"
export BENCH_UNTIL=430; source tools/gpu/bench_switch.sh
bench_switch main 32 X=1
tar czf $OUT/bench_logs.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
