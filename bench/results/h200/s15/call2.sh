#!/usr/bin/env bash
# Session 15, call 2, branch exp/s15 as in call 1: the shared-memory delta norm
# (QV_EXP_NORMSMEM=N) against the cluster kernel at batch 1, 2, 8, 32, 64, interleaved,
# shrink ahead off (QV_EXP_NOAHEAD=1: call 1 measured it slower at every batch).
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_delta" OUT=$OUT/new timeout 200 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|PASSED|FAILED|^build|error|Failure" $OUT/new.txt | cut -c1-150 | head -8
mkdir -p /tmp/x_logs
B=(./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16 --commit exp-s15)
run() {  # name bs VAR=VALUE [bench flags...]
  local name=$1 bs=$2 var=$3; shift 3
  [ $((SECONDS - T0)) -gt 500 ] && return
  env QV_EXP_NOAHEAD=1 "$var" timeout 45 "${B[@]}" --batch-size $bs --input-len 128 --output-len 64 --num-adapters $bs --compare base \
    --num-iters 1 --max-num-seqs $bs --kv-cache-memory 16GiB "$@" >/tmp/x_logs/${name}_b$bs.log 2>&1
  echo "b$bs $name (LoRA, base): $(grep -E '^  decode ' /tmp/x_logs/${name}_b$bs.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ') at $((SECONDS - T0)) s"
}
for i in 1 2; do
  run cluster_$i 8 X=1; run smem_$i 8 QV_EXP_NORMSMEM=64
  run cluster_$i 2 X=1; run smem_$i 2 QV_EXP_NORMSMEM=64
  run cluster_$i 32 X=1; run smem_$i 32 QV_EXP_NORMSMEM=64
done
for i in 3 4 5; do run cluster_$i 1 X=1; run smem_$i 1 QV_EXP_NORMSMEM=64; done
run cluster 64 X=1; run smem 64 QV_EXP_NORMSMEM=64
run cluster_eager 1 X=1 --enforce-eager; run smem_eager 1 QV_EXP_NORMSMEM=64 --enforce-eager
tar czf $OUT/extra.tgz -C /tmp/x_logs . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
