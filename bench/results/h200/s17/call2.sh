#!/usr/bin/env bash
# Session 17, call 2, branch exp/s17: gemm_skinny_wide.cu, the decode matmul of 17..32 tokens
# on tensor cores with 64-row tiles split over `in` (x of a split in shared memory, 0.5 B of x
# per byte of weights; the last block of a tile adds the splits in order), the LoRA shrink
# in the same launch. QV_EXP_WIDE: LoRA projections; QV_EXP_WIDE_PLAIN: plain matmuls too.
# Its tests (test_cuda_groups' *WideExp), the graph / delta tests and verify with both on;
# the matmul alone against cuBLAS; then batch 32 and 24 interleaved.
set -u
T0=$SECONDS
QV_EXP_WIDE=1 QV_EXP_WIDE_PLAIN=1 TARGETS="test_cuda_groups test_cuda_graphs test_cuda_lora_delta bench_cuda_ops" \
  VERIFY=1 OUT=$OUT/wide timeout 330 bash tools/gpu/run_checks.sh > $OUT/wide.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/wide.txt | cut -c1-160 | head -30
tar xzf $OUT/wide/logs.tgz -C /tmp ./test_cuda_groups.log 2>/dev/null && grep -E "wide|FAIL" /tmp/test_cuda_groups.log | grep -E "n=32|n=17|FAIL" | head -12
echo "checks end at $((SECONDS - T0)) s"
timeout 40 ./build-gpu/bench_cuda_ops --benchmark_filter='BM_CudaMatmulBf16/.*/n:(16|32)/path:3' \
  --benchmark_min_time=0.05s 2>&1 | grep -E "BM_" | sed -E 's/ +/ /g' | cut -c1-120 | tee $OUT/ops_cublas.txt
QV_EXP_WIDE_PLAIN=1 timeout 40 ./build-gpu/bench_cuda_ops --benchmark_filter='BM_CudaMatmulBf16/.*/n:(16|24|32)/path:4' \
  --benchmark_min_time=0.05s 2>&1 | grep -E "BM_" | sed -E 's/ +/ /g' | cut -c1-120 | tee $OUT/ops_wide.txt
echo "ops end at $((SECONDS - T0)) s"
export BENCH_UNTIL=520; source tools/gpu/bench_switch.sh
for i in 1 2; do
  bench_switch off_$i 32 X=1; bench_switch wide_$i 32 QV_EXP_WIDE=1; bench_switch both_$i 32 QV_EXP_WIDE=1 QV_EXP_WIDE_PLAIN=1
done
bench_switch off 24 X=1; bench_switch wide 24 QV_EXP_WIDE=1; bench_switch both 24 QV_EXP_WIDE=1 QV_EXP_WIDE_PLAIN=1
bench_switch wide_eager 32 QV_EXP_WIDE=1 --enforce-eager
tar czf $OUT/extra.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
