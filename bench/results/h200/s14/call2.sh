#!/usr/bin/env bash
# Session 14, call 2: where batch 1's remaining LoRA cost goes after the cluster norm
# (b2718c9), and launch-shape variants of its consumers. One build of the checkout with
# temporary switches (env, not committed): QV_ABL_NODELTA=1|OP (all consumers / the one named
# skip the term), QV_EXP_NCL16 (the delta norm in clusters of 16 blocks of 64 threads,
# non-portable), QV_EXP_ROPET / QV_EXP_SILUT (threads a block of rope_kv_write's and
# silu_mul's delta kernels; 128 and 64 now).
set -u
T0=$SECONDS
source tools/gpu/setup_deps.sh
bash tools/gpu/build_tree.sh . $OUT/build.log || { grep -m5 -A5 error $OUT/build.log; tail -20 $OUT/build.log; exit 1; }
echo "built at $((SECONDS - T0)) s"
B=(./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16 --commit b2718c9+switches)
mkdir -p /tmp/x_logs
run() {  # name bs env...
  local name=$1 bs=$2; shift 2
  [ $((SECONDS - T0)) -gt 500 ] && return
  env "$@" timeout 20 "${B[@]}" --batch-size $bs --input-len 128 --output-len 64 --num-adapters $bs --compare base \
    --num-iters 1 --max-num-seqs $bs --kv-cache-memory 16GiB >/tmp/x_logs/${name}_b$bs.log 2>&1
  echo "b$bs $name (LoRA, base): $(grep -E '^  decode ' /tmp/x_logs/${name}_b$bs.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ') at $((SECONDS - T0)) s"
}
run main 1 X=1; run nd_all 1 QV_ABL_NODELTA=1; run nd_norm 1 QV_ABL_NODELTA=add_rms_norm
run nd_rope 1 QV_ABL_NODELTA=rope_kv_write; run nd_silu 1 QV_ABL_NODELTA=silu_mul
run ncl16 1 QV_EXP_NCL16=1; run ropet64 1 QV_EXP_ROPET=64; run ropet32 1 QV_EXP_ROPET=32
run silut32 1 QV_EXP_SILUT=32; run silut128 1 QV_EXP_SILUT=128; run main2 1 X=1; run ncl16b 1 QV_EXP_NCL16=1
run main 8 X=1; run ncl16 8 QV_EXP_NCL16=1; run ropet64 8 QV_EXP_ROPET=64; run silut128 8 QV_EXP_SILUT=128
run nd_norm 8 QV_ABL_NODELTA=add_rms_norm; run nd_rope 8 QV_ABL_NODELTA=rope_kv_write; run nd_silu 8 QV_ABL_NODELTA=silu_mul
run main3 1 X=1
tar czf $OUT/extra.tgz -C /tmp/x_logs . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
