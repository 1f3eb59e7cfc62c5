#!/usr/bin/env bash
# Session 17, call 4, branch exp/s17b (main + QV_EXP_CUBLAS_WS, the cuBLAS workspace size in
# bytes). Call 3's ncu showed cuBLAS at 32 tokens taking a split-K kernel (64 x 32 tiles)
# plus a reduce kernel for the 4,096-row products: 14.4 + 3.9 us for 33.5 MB, 43% of the
# copy ceiling. Without a workspace it cannot split K that way. test_cuda_ops with it at 0,
# the matmul alone, then batch 32 / 64 and (c) interleaved.
set -u
T0=$SECONDS
[ -d .deps/debs ] && source tools/gpu/setup_deps.sh
bash tools/gpu/build_tree.sh . $OUT/build.log test_cuda_ops bench_cuda_ops || { tail -20 $OUT/build.log; exit 1; }
echo "build at $((SECONDS - T0)) s"
QV_EXP_CUBLAS_WS=0 timeout 60 ./build-gpu/test_cuda_ops > $OUT/ops_test.log 2>&1; echo "test_cuda_ops ws=0 rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/ops_test.log)"
for ws in 33554432 0; do
  QV_EXP_CUBLAS_WS=$ws timeout 40 ./build-gpu/bench_cuda_ops --benchmark_filter='BM_CudaMatmulBf16/.*/n:(16|32|64)/path:3' \
    --benchmark_min_time=0.05s 2>&1 | grep -E "^BM_" | sed -E 's/ +/ /g;s/manual_time//' | cut -c18-100 | sed "s/^/ws=$ws /"
done
echo "ops end at $((SECONDS - T0)) s"
export BENCH_UNTIL=330; source tools/gpu/bench_switch.sh
bench_switch ws32m_1 32 X=1; bench_switch ws0_1 32 QV_EXP_CUBLAS_WS=0
for sw in X=1 QV_EXP_CUBLAS_WS=0; do
  [ $((SECONDS - T0)) -lt 300 ] && env $sw timeout 70 ./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy \
    --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16 --batch-size 256 --input-len 256 --output-len 128 \
    --num-adapters 64 --num-iters 1 --warmup-steps 2 --kv-cache-memory 56GiB >$BENCH_LOGS/c_$sw.log 2>&1
  echo "(c) $sw: $(grep -E '^  end-to-end' $BENCH_LOGS/c_$sw.log | tr -s ' ') decode $(grep -E '^  decode ' $BENCH_LOGS/c_$sw.log | tr -s ' ' | cut -c1-60)"
done
bench_switch ws32m 64 X=1; bench_switch ws0 64 QV_EXP_CUBLAS_WS=0
bench_switch ws32m_2 32 X=1; bench_switch ws0_2 32 QV_EXP_CUBLAS_WS=0
tar czf $OUT/extra.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
