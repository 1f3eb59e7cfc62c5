#!/usr/bin/env bash
# Session 14, call 3: b2718c9 + the batch-1 GEMV's A blocks prefetching the B rows of a
# one-member group (o, down) into L2 for the delta norm (gemv_lora.cu, prefetch_b). GPU tests,
# fixtures and verify on it; then temporary switches (env, not committed): QV_EXP_PF=0 (no
# prefetch: b2718c9), 1 (after the A block's sums, the default here), 2 (before them),
# 3 (as 1 with an L2 evict_last hint); QV_EXP_PFALL (every group's B, not only o / down);
# QV_ABL_NOB (the delta norm skips its B rows: what they cost); QV_EXP_NOPDLNORM (the delta
# norm launched without programmatic serialisation: whether PDL takes it early at all).
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_delta test_cuda_ops test_cuda_graphs test_cuda_groups test_cuda_lora" FIX=1 VERIFY=1 OUT=$OUT/new \
  timeout 260 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/new.txt | cut -c1-150 | head -24
echo "checks end at $((SECONDS - T0)) s"
B=(./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16 --commit b2718c9+prefetch)
mkdir -p /tmp/x_logs
run() {  # name bs env...
  local name=$1 bs=$2; shift 2
  [ $((SECONDS - T0)) -gt 470 ] && return
  env "$@" timeout 25 "${B[@]}" --batch-size $bs --input-len 128 --output-len 64 --num-adapters $bs --compare base \
    --num-iters 1 --max-num-seqs $bs --kv-cache-memory 16GiB >/tmp/x_logs/${name}_b$bs.log 2>&1
  echo "b$bs $name (LoRA, base): $(grep -E '^  decode ' /tmp/x_logs/${name}_b$bs.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ') at $((SECONDS - T0)) s"
}
run pf1 1 X=1; run pf0 1 QV_EXP_PF=0; run pf2 1 QV_EXP_PF=2; run pf3 1 QV_EXP_PF=3
run nob 1 QV_ABL_NOB=1; run nopdl 1 QV_EXP_NOPDLNORM=1; run pfall 1 QV_EXP_PFALL=1
run pf1b 1 X=1; run pf0b 1 QV_EXP_PF=0; run pf2b 1 QV_EXP_PF=2; run pf3b 1 QV_EXP_PF=3; run pf1c 1 X=1; run pf0c 1 QV_EXP_PF=0
run pf1 8 X=1; run pf0 8 QV_EXP_PF=0
run pf1 32 X=1; run pf1 64 X=1
timeout 60 "${B[@]}" --batch-size 1 --input-len 128 --output-len 64 --num-adapters 1 --compare base \
  --num-iters 1 --max-num-seqs 1 --kv-cache-memory 16GiB --enforce-eager >/tmp/x_logs/pf1_b1_eager.log 2>&1
echo "b1 eager (LoRA, base): $(grep -E '^  decode ' /tmp/x_logs/pf1_b1_eager.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ')"
[ $((SECONDS - T0)) -lt 440 ] && timeout 90 "${B[@]}" --batch-size 256 --input-len 256 --output-len 128 --num-adapters 64 --num-iters 1 \
  --warmup-steps 2 --kv-cache-memory 56GiB >/tmp/x_logs/c.log 2>&1 && echo "(c): $(grep -E '^  end-to-end' /tmp/x_logs/c.log | tr -s ' ')"
tar czf $OUT/extra.tgz -C /tmp/x_logs . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
