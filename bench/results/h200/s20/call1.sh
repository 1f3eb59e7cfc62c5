#!/usr/bin/env bash
# Session 20, call 1, main 4a3df38: the GPU checks for c1ac8b4 (CudaBackend::scratch waits
# for its zeroing memset), which landed compiled only: five GPU test binaries, every HF
# fixture, verify; then one batch-32 and one batch-64 run for drift.
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_delta test_cuda_graphs test_cuda_lora test_cuda_groups test_cuda_ops" FIX=1 VERIFY=1 \
  OUT=$OUT/checks timeout 300 bash tools/gpu/run_checks.sh > $OUT/checks.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/checks.txt | cut -c1-150 | head -30
echo "checks end at $((SECONDS - T0)) s"
export BENCH_UNTIL=300; source tools/gpu/bench_switch.sh
bench_switch main 32 X=1
bench_switch main 64 X=1
tar czf $OUT/bench_logs.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
