#!/usr/bin/env bash
# Session 18, call 3, branch exp/s18c: next/norm-shrink (548e2dc: o and down of 3..64
# tokens leave their LoRA shrink to the norm after them, norm_lora_shrink.cu) plus
# QV_EXP_NORM_SHRINK (0: CudaBackendOptions::norm_shrink off, i.e. main's side-stream
# shrink). Call 2 had the fork and join alone at ~0.5 ms a batch-32 step. The GPU tests
# that cover the change with the switch unset, then batch 32 / 64 and (c), on (X=1) and
# off taking turns.
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_delta test_cuda_graphs test_cuda_groups test_cuda_lora" OUT=$OUT/checks \
  timeout 240 bash tools/gpu/run_checks.sh > $OUT/checks.txt 2>&1
grep -E "rc=|FAIL|PASSED|FAILED|^build|error|Failure|shrink left" $OUT/checks.txt | sort | uniq -c | sort -rn | cut -c1-170 | head -40
mkdir -p /tmp/ck && tar xzf $OUT/checks/logs.tgz -C /tmp/ck 2>/dev/null
grep -hE " FAIL$|shrink left" /tmp/ck/test_cuda_lora_delta.log | cut -c1-200 | head -30
echo "checks end at $((SECONDS - T0)) s"
export BENCH_UNTIL=340; source tools/gpu/bench_switch.sh
for i in 1 2; do bench_switch on_$i 32 X=1; bench_switch off_$i 32 QV_EXP_NORM_SHRINK=0; done
bench_switch on 64 X=1; bench_switch off 64 QV_EXP_NORM_SHRINK=0
for sw in X=1 QV_EXP_NORM_SHRINK=0; do
  [ $((SECONDS - T0)) -lt 330 ] || continue
  env $sw timeout 60 ./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy \
    --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16 --batch-size 256 --input-len 256 --output-len 128 \
    --num-adapters 64 --num-iters 1 --warmup-steps 2 --kv-cache-memory 56GiB >$BENCH_LOGS/c_$sw.log 2>&1
  echo "(c) $sw: $(grep -E '^  end-to-end' $BENCH_LOGS/c_$sw.log | tr -s ' ') decode $(grep -E '^  decode ' $BENCH_LOGS/c_$sw.log | tr -s ' ' | cut -c1-60)"
done
tar czf $OUT/bench_logs.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
