#!/usr/bin/env bash
# Session 17, call 1, branch exp/s17 (main 159257b + one switch). First main's GPU checks
# with the switch off (ca63382 and 159257b had not run on the GPU): all five GPU test
# binaries, every HF fixture, verify. Then QV_EXP_MAINSHRINK=64: decode projections of
# 17..64 tokens run the token shrink on the main stream before the cuBLAS matmul, launched
# with PDL so its A loads overlap the norm before it, instead of on the side stream with a
# fork and a join. Its graph / delta tests and verify, then b32 / b64 / (c) interleaved.
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_delta test_cuda_graphs test_cuda_lora test_cuda_groups test_cuda_ops" FIX=1 VERIFY=1 OUT=$OUT/off \
  timeout 330 bash tools/gpu/run_checks.sh > $OUT/off.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/off.txt | cut -c1-150 | head -30
echo "checks end at $((SECONDS - T0)) s"
QV_EXP_MAINSHRINK=64 TARGETS="test_cuda_lora_delta test_cuda_graphs" VERIFY=1 OUT=$OUT/on \
  timeout 150 bash tools/gpu/run_checks.sh > $OUT/on.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|error|Failure" $OUT/on.txt | cut -c1-150 | head -30
echo "switch checks end at $((SECONDS - T0)) s"
export BENCH_UNTIL=540; source tools/gpu/bench_switch.sh
for i in 1 2; do bench_switch off_$i 32 X=1; bench_switch on_$i 32 QV_EXP_MAINSHRINK=64; done
for i in 1 2; do bench_switch off_$i 64 X=1; bench_switch on_$i 64 QV_EXP_MAINSHRINK=64; done
bench_switch off 24 X=1; bench_switch on 24 QV_EXP_MAINSHRINK=64
for sw in X=1 QV_EXP_MAINSHRINK=64; do
  [ $((SECONDS - T0)) -lt 530 ] && env $sw timeout 70 ./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy \
    --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16 --batch-size 256 --input-len 256 --output-len 128 \
    --num-adapters 64 --num-iters 1 --warmup-steps 2 --kv-cache-memory 56GiB >$BENCH_LOGS/c_$sw.log 2>&1
  echo "(c) $sw: $(grep -E '^  end-to-end' $BENCH_LOGS/c_$sw.log | tr -s ' ')"
done
tar czf $OUT/extra.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
