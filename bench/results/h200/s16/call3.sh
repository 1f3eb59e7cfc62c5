#!/usr/bin/env bash
# Session 16, call 3, main after exp/skinny's merge: the tensor-core matmul of 3..16 tokens
# on by default (skinny_max_n 8 for plain matmuls, skinny_lora_max_n 16 for a projection
# with its LoRA shrink in the same launch, U = 2), and the norm.cu review mends (lora_dot8,
# the smem kernel's attribute set once). All five GPU test binaries, every HF fixture,
# verify; then the issue 6 numbers: batch 1 (twice, and eager), 2, 4, 8 (twice), 16, 32, 64
# and (c).
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_delta test_cuda_graphs test_cuda_lora test_cuda_groups test_cuda_ops" FIX=1 VERIFY=1 OUT=$OUT/new \
  timeout 330 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/new.txt | cut -c1-150 | head -30
echo "checks end at $((SECONDS - T0)) s"
export BENCH_UNTIL=520; source tools/gpu/bench_switch.sh
bench_switch main_1 1 X=1; bench_switch main_2 1 X=1; bench_switch main_eager 1 X=1 --enforce-eager
for bs in 2 4 8; do bench_switch main_1 $bs X=1; done
bench_switch main_2 8 X=1
for bs in 16 32 64; do bench_switch main $bs X=1; done
[ $((SECONDS - T0)) -lt 520 ] && timeout 70 ./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy \
  --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16 --batch-size 256 --input-len 256 --output-len 128 \
  --num-adapters 64 --num-iters 1 --warmup-steps 2 --kv-cache-memory 56GiB >$BENCH_LOGS/c.log 2>&1
echo "(c): $(grep -E '^  end-to-end' $BENCH_LOGS/c.log | tr -s ' ')"
tar czf $OUT/extra.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
