#!/usr/bin/env bash
# Session 18, call 1, branch exp/s18: next/decode-cublas with main merged (980fcb5) plus one
# switch, QV_EXP_NOWS_MAX_N, which overrides CudaBackendOptions::cublas_no_workspace_max_n
# (0 = main's single cuBLAS handle with the 32 MiB workspace). First the GPU checks with the
# switch unset (the candidate as it would land, and main's 321bc13, which had not run on the
# GPU): all five GPU test binaries, every HF fixture, verify. Then batch 16 / 32 / 64 and
# (c), candidate (X=1) and main's behaviour (=0) taking turns.
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_delta test_cuda_graphs test_cuda_lora test_cuda_groups test_cuda_ops" FIX=1 VERIFY=1 OUT=$OUT/checks \
  timeout 330 bash tools/gpu/run_checks.sh > $OUT/checks.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/checks.txt | cut -c1-150 | head -30
echo "checks end at $((SECONDS - T0)) s"
export BENCH_UNTIL=500; source tools/gpu/bench_switch.sh
for i in 1 2; do bench_switch new_$i 32 X=1; bench_switch main_$i 32 QV_EXP_NOWS_MAX_N=0; done
bench_switch new 16 X=1; bench_switch main 16 QV_EXP_NOWS_MAX_N=0
for i in 1 2; do bench_switch new_$i 64 X=1; bench_switch main_$i 64 QV_EXP_NOWS_MAX_N=0; done
for i in 1 2; do
  for sw in X=1 QV_EXP_NOWS_MAX_N=0; do
    [ $((SECONDS - T0)) -lt 530 ] || continue
    env $sw timeout 60 ./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy \
      --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16 --batch-size 256 --input-len 256 --output-len 128 \
      --num-adapters 64 --num-iters 1 --warmup-steps 2 --kv-cache-memory 56GiB >$BENCH_LOGS/c_${sw}_$i.log 2>&1
    echo "(c) $sw round $i: $(grep -E '^  end-to-end' $BENCH_LOGS/c_${sw}_$i.log | tr -s ' ') decode $(grep -E '^  decode ' $BENCH_LOGS/c_${sw}_$i.log | tr -s ' ' | cut -c1-60)"
  done
done
tar czf $OUT/bench_logs.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
