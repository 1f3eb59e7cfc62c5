#!/usr/bin/env bash
# Session 15, call 1, branch exp/s15 (exp/shrink-ahead merged with exp/norm-smem), one binary:
# - LoraShrinkAhead on by default (3..64 tokens: the q/k/v and gate/up shrinks inside the
#   cluster norm); QV_EXP_NOAHEAD=1 ignores the hint (main's path).
# - QV_EXP_NORMSMEM=N: the shared-memory one-block delta norm up to N rows (no ahead).
# GPU tests, fixtures and verify with the defaults; tests and verify again with
# QV_EXP_NORMSMEM=64; then interleaved benches of each switch against its baseline.
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_delta test_cuda_graphs test_cuda_lora test_cuda_groups" FIX=1 VERIFY=1 OUT=$OUT/new \
  timeout 300 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/new.txt | cut -c1-150 | head -30
echo "checks end at $((SECONDS - T0)) s"
mkdir -p /tmp/x_logs
for t in test_cuda_lora_delta test_cuda_graphs; do
  QV_EXP_NORMSMEM=64 timeout 60 ./build-gpu/$t >/tmp/x_logs/smem_$t.log 2>&1
  echo "smem $t rc=$? $(grep -E '^\[  (PASSED|FAILED)' /tmp/x_logs/smem_$t.log | tr '\n' ' ')"
  grep -E "Failure|Expected|Which is" /tmp/x_logs/smem_$t.log | head -8
done
fx=tests/fixtures/llama3_bf16; loras=()
for a in "$fx"/adapters/*; do loras+=(--lora "$(basename "$a")=$a"); done
QV_EXP_NORMSMEM=64 timeout 60 ./build-gpu/quiver verify --model "$fx" "${loras[@]}" --max-lora-rank 64 --max-loras 8 \
  --device cuda --input "$fx/requests.jsonl" >/tmp/x_logs/smem_verify.log 2>&1
echo "smem verify rc=$? $(grep -E '^verify:' /tmp/x_logs/smem_verify.log)"
echo "smem checks end at $((SECONDS - T0)) s"
B=(./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16 --commit exp-s15)
run() {  # name bs env...
  local name=$1 bs=$2; shift 2
  [ $((SECONDS - T0)) -gt 530 ] && return
  env "$@" timeout 45 "${B[@]}" --batch-size $bs --input-len 128 --output-len 64 --num-adapters $bs --compare base \
    --num-iters 1 --max-num-seqs $bs --kv-cache-memory 16GiB >/tmp/x_logs/${name}_b$bs.log 2>&1
  echo "b$bs $name (LoRA, base): $(grep -E '^  decode ' /tmp/x_logs/${name}_b$bs.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ') at $((SECONDS - T0)) s"
}
for i in 1 2; do
  run main_$i 8 QV_EXP_NOAHEAD=1; run ahead_$i 8 X=1
  run main_$i 32 QV_EXP_NOAHEAD=1; run ahead_$i 32 X=1
done
run main 4 QV_EXP_NOAHEAD=1; run ahead 4 X=1
run main 64 QV_EXP_NOAHEAD=1; run ahead 64 X=1
for i in 1 2 3; do run cluster_$i 1 X=1; run smem_$i 1 QV_EXP_NORMSMEM=1; done
tar czf $OUT/extra.tgz -C /tmp/x_logs . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
