#!/usr/bin/env bash
# Session 19, call 2, branch exp/s19: next/flag-join (740d46e: the token shrink hands t to
# the op after the matmul through device words, lora_ready.cuh) plus one switch,
# QV_EXP_EVJOIN=1, which restores main's event join. First the GPU checks with the switch
# unset (the candidate as it would land): the new hand-off test, all five other GPU test
# binaries, every HF fixture, verify. Then batch 32 / 64 / 24 and (c), candidate (X=1) and
# main's join taking turns.
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_handoff test_cuda_lora_delta test_cuda_graphs test_cuda_lora test_cuda_groups test_cuda_ops" \
  FIX=1 VERIFY=1 OUT=$OUT/checks timeout 360 bash tools/gpu/run_checks.sh > $OUT/checks.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/checks.txt | cut -c1-150 | head -30
echo "checks end at $((SECONDS - T0)) s"
export BENCH_UNTIL=520; source tools/gpu/bench_switch.sh
for i in 1 2; do bench_switch flag_$i 32 X=1; bench_switch evjoin_$i 32 QV_EXP_EVJOIN=1; done
bench_switch flag 64 X=1; bench_switch evjoin 64 QV_EXP_EVJOIN=1
bench_switch flag 24 X=1; bench_switch evjoin 24 QV_EXP_EVJOIN=1
for sw in X=1 QV_EXP_EVJOIN=1; do
  [ $((SECONDS - T0)) -lt 540 ] || continue
  env $sw timeout 60 ./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy \
    --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16 --batch-size 256 --input-len 256 --output-len 128 \
    --num-adapters 64 --num-iters 1 --warmup-steps 2 --kv-cache-memory 56GiB >$BENCH_LOGS/c_${sw}.log 2>&1
  echo "(c) $sw: $(grep -E '^  end-to-end' $BENCH_LOGS/c_${sw}.log | tr -s ' ') decode $(grep -E '^  decode ' $BENCH_LOGS/c_${sw}.log | tr -s ' ' | cut -c1-60)"
done
tar czf $OUT/bench_logs.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
