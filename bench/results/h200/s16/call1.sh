#!/usr/bin/env bash
# Proposed first call of session 16, from branch exp/skinny (compiled for sm_80 and sm_90,
# never run on a GPU): the tensor-core matmul of 3..16 tokens with the LoRA shrink in the
# same launch (gemm_skinny.cu), switched on for every backend by QV_EXP_SKINNY=16. Tests,
# fixtures and verify with it on (test_cuda_groups has its own tests with the option set);
# then batch 4, 8 and 16, LoRA and base, interleaved with it off (cuBLAS + fork / join), and
# batch 8 and 16 with QV_EXP_BPREFETCH=1 too. Tests with the prefetch on are not run: it
# only moves bytes into L2 and changes no result.
# Check the branch out before calling the device; carry [".deps"].
set -u
T0=$SECONDS
QV_EXP_SKINNY=16 TARGETS="test_cuda_groups test_cuda_graphs test_cuda_lora test_cuda_lora_delta" FIX=1 VERIFY=1 \
  OUT=$OUT/new timeout 330 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure|Expected|Which is" $OUT/new.txt | cut -c1-200 | head -30
echo "checks end at $((SECONDS - T0)) s"
# Kernel level: the matmul alone, cuBLAS (path 3) against the skinny kernel (path 4).
cmake --build build-gpu --target bench_cuda_ops >/dev/null 2>&1 &&
  timeout 90 ./build-gpu/bench_cuda_ops --benchmark_filter='BM_CudaMatmulBf16/.*/n:(4|8|16)/path:(3|4)' \
    --benchmark_min_time=0.05s > $OUT/ops.txt 2>&1
grep -E "BM_" $OUT/ops.txt | sed -E 's/ +/ /g' | cut -c1-160
BENCH_UNTIL=520 source tools/gpu/bench_switch.sh
for i in 1 2; do
  for bs in 8 4 16; do bench_switch cublas_$i $bs X=1; bench_switch skinny_$i $bs QV_EXP_SKINNY=16; done
  # The deferred expand's B rows prefetched into L2 by the shrink blocks, weights evict-first.
  for bs in 8 16; do bench_switch skinnypf_$i $bs QV_EXP_SKINNY=16 QV_EXP_BPREFETCH=1; done
done
tar czf $OUT/extra.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
