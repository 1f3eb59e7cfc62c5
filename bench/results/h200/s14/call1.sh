#!/usr/bin/env bash
# Session 14, call 1: the checkout (018fafd + the delta norm split over a cluster of blocks a
# row, norm.cu) against 018fafd (base). GPU tests, every fixture and verify on the checkout
# (also the first GPU run of 745ed92 / 018fafd's lora_delta.cuh refactors); batch 1/8/32/64
# and batch-1 eager against base; then temporary switches (env, not committed) on the
# checkout's binary: QV_EXP_NCL=N (the cluster kernel up to N rows, 0: never),
# QV_ABL_NODELTA (consumers skip the term), batch 1 twice for the noise.
set -u
T0=$SECONDS
ln -sfn .. build-trees/new
bash tools/gpu/prebuild_trees.sh "base:"
TARGETS="test_cuda_lora_delta test_cuda_ops test_cuda_graphs test_cuda_groups test_cuda_lora" FIX=1 VERIFY=1 OUT=$OUT/new \
  timeout 260 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/new.txt | cut -c1-150 | head -24
echo "checks end at $((SECONDS - T0)) s"
while ! ls /tmp/built_base.* >/dev/null 2>&1; do sleep 2; done; ls /tmp/built_base.*
TREES="new base" NOTEST="new base" BS="1 8 32 64" EAGER=1 OUT=$OUT/c timeout $((480 - (SECONDS - T0))) \
  bash tools/gpu/compare_trees.sh > $OUT/c.txt 2>&1
tail -10 $OUT/c.txt
echo "compare end at $((SECONDS - T0)) s"
B=(./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16)
BB=(build-trees/base/build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16)
mkdir -p /tmp/x_logs
run() {  # name bs bin-array-name env...
  local name=$1 bs=$2 arr=$3; shift 3
  local -n bin=$arr
  [ $((SECONDS - T0)) -gt 560 ] && return
  env "$@" timeout 20 "${bin[@]}" --batch-size $bs --input-len 128 --output-len 64 --num-adapters $bs --compare base \
    --num-iters 1 --max-num-seqs $bs --kv-cache-memory 16GiB >/tmp/x_logs/${name}_b$bs.log 2>&1
  echo "b$bs $name (LoRA, base): $(grep -E '^  decode ' /tmp/x_logs/${name}_b$bs.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ')"
}
run new2 1 B X=1; run base2 1 BB X=1; run nodelta 1 B QV_ABL_NODELTA=1; run ncl0 1 B QV_EXP_NCL=0
run ncl0 8 B QV_EXP_NCL=0; run nodelta 8 B QV_ABL_NODELTA=1; run new3 1 B X=1; run base3 1 BB X=1
run ncl0 32 B QV_EXP_NCL=0; run ncl8 32 B QV_EXP_NCL=8
tar czf $OUT/extra.tgz -C /tmp/x_logs . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
