#!/usr/bin/env bash
# Session 16, call 2, branch exp/skinny: call 1 found the skinny kernel correct but slower
# than cuBLAS (4096 x 4096 at 8 tokens 19.3 against 18.4 us, 11008 x 4096 37.6 against
# 29.0 us; in the step, base b8 5.60 against 5.13 ms) with only one step (64 B a lane) of
# weights in flight beyond the one in use. The kernel now issues U steps' weight loads a
# round (QV_EXP_SKU=2/3/4, default 4), as the GEMV does. Tests with U=4, the matmul alone
# for U=2/3/4 against cuBLAS and the GEMV (path 0), then the step with the best U.
set -u
T0=$SECONDS
QV_EXP_SKINNY=16 TARGETS="test_cuda_groups test_cuda_lora_delta" FIX=1 VERIFY=1 \
  OUT=$OUT/new timeout 300 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure|Expected|Which is" $OUT/new.txt | cut -c1-200 | head -30
echo "checks end at $((SECONDS - T0)) s"
cmake --build build-gpu --target bench_cuda_ops >/dev/null 2>&1
timeout 40 ./build-gpu/bench_cuda_ops --benchmark_filter='BM_CudaMatmulBf16/.*/n:(4|8|16)/path:(0|3)' \
  --benchmark_min_time=0.05s > $OUT/ops_ref.txt 2>&1
grep -E "BM_" $OUT/ops_ref.txt | sed -E 's/ +/ /g' | cut -c1-110
best=4 best_us=1e9
for u in 2 3 4; do
  QV_EXP_SKU=$u timeout 40 ./build-gpu/bench_cuda_ops --benchmark_filter='BM_CudaMatmulBf16/.*/n:(4|8|16)/path:4' \
    --benchmark_min_time=0.05s > $OUT/ops_u$u.txt 2>&1
  echo "U=$u"; grep -E "BM_" $OUT/ops_u$u.txt | sed -E 's/ +/ /g' | cut -c1-110
  us=$(grep -E "n:8/path:4" $OUT/ops_u$u.txt | sed -E 's/.*us=([0-9.]+).*/\1/' | awk '{s+=$1} END {print s+0}')
  if awk "BEGIN {exit !($us > 0 && $us < $best_us)}"; then best=$u best_us=$us; fi
done
echo "best U=$best (n=8 sum $best_us us) at $((SECONDS - T0)) s"
export BENCH_UNTIL=500; source tools/gpu/bench_switch.sh
for i in 1 2; do
  for bs in 8 4 16; do
    bench_switch cublas_$i $bs X=1; bench_switch skinny_$i $bs QV_EXP_SKINNY=16 QV_EXP_SKU=$best
  done
done
tar czf $OUT/extra.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
