#!/usr/bin/env bash
# Session 13, call 1: where the LoRA's decode cost goes at batch 1 and 8 (graphs). One build
# of the checkout with temporary ablation switches (env, not committed): QV_ABL_NODELTA (the
# consumers skip the deferred B . t), QV_ABL_NOSHRINK (no A blocks / no token shrink and no
# fork/join; t is stale scratch), QV_ABL_SERIAL (3..64 tokens: token shrink on the main stream
# before the GEMM, no fork/join). Then ncu of one eager decode step at batch 8, LoRA and base.
set -u
T0=$SECONDS
source tools/gpu/setup_deps.sh
bash tools/gpu/build_tree.sh . $OUT/build.log test_decode_split || { grep -m5 -A5 error $OUT/build.log; tail -20 $OUT/build.log; exit 1; }
echo "built at $((SECONDS - T0)) s"
B=(./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16)
run() {
  local name=$1; shift
  env "$@" timeout 80 "${B[@]}" --batch-size $bs --input-len 128 --output-len 64 --num-adapters $bs --compare base \
    --num-iters 1 --max-num-seqs $bs --kv-cache-memory 16GiB >$OUT/b${bs}_$name.log 2>&1
  echo "b$bs $name (LoRA, base): $(grep -E '^  decode ' $OUT/b${bs}_$name.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ') at $((SECONDS - T0)) s"
}
for bs in 1 8; do
  run main X=1; run nodelta QV_ABL_NODELTA=1; run noshrink QV_ABL_NOSHRINK=1; run both QV_ABL_NODELTA=1 QV_ABL_NOSHRINK=1
done
bs=8; run serial QV_ABL_SERIAL=1; run serial_nodelta QV_ABL_SERIAL=1 QV_ABL_NODELTA=1
bs=1; run main2 X=1
for a in 8 0; do
  [ $((SECONDS - T0)) -gt 480 ] && break
  TARGETS=test_decode_split NCU=1 NCU_BS=8 NCU_IN=16 NCU_ADAPTERS=$a NCU_COUNT=1600 NCU_T=100 NCU_SHOW="2" OUT=$OUT/ncu_b8_a$a \
    timeout 110 bash tools/gpu/run_checks.sh > $OUT/ncu_b8_a$a.txt 2>&1
  grep -E "^forward|^ +[0-9.]+ us" $OUT/ncu_b8_a$a.txt | head -17
done
echo "end at $((SECONDS - T0)) s"
