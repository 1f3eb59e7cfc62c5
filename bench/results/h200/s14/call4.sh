#!/usr/bin/env bash
# Session 14, call 4: the cluster delta norm's sum exchange with one barrier phase that waits
# (each block writes its sum into every block's shared memory, then one cluster barrier;
# the phase that makes sure all blocks have started is arrived at on entry), against
# b2718c9's (sync, read the others' sums, barrier before leaving). GPU tests, fixtures and
# verify with the new exchange; then temporary switches (env, not committed):
# QV_EXP_TWOBAR (b2718c9's exchange), QV_EXP_NC=4 (clusters of 4 x 256 threads, not 8 x 128),
# QV_ABL_NODELTA=add_rms_norm (the norm skips the term: the floor of this kernel's cost).
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_delta test_cuda_ops test_cuda_graphs" FIX=1 VERIFY=1 OUT=$OUT/new \
  timeout 260 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/new.txt | cut -c1-150 | head -24
echo "checks end at $((SECONDS - T0)) s"
B=(./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16 --commit b2718c9+onebar)
mkdir -p /tmp/x_logs
run() {  # name bs env...
  local name=$1 bs=$2; shift 2
  [ $((SECONDS - T0)) -gt 400 ] && return
  env "$@" timeout 45 "${B[@]}" --batch-size $bs --input-len 128 --output-len 64 --num-adapters $bs --compare base \
    --num-iters 1 --max-num-seqs $bs --kv-cache-memory 16GiB >/tmp/x_logs/${name}_b$bs.log 2>&1
  echo "b$bs $name (LoRA, base): $(grep -E '^  decode ' /tmp/x_logs/${name}_b$bs.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ') at $((SECONDS - T0)) s"
}
for i in 1 2 3; do
  run one8_$i 1 X=1; run two8_$i 1 QV_EXP_TWOBAR=1; run one4_$i 1 QV_EXP_NC=4; run two4_$i 1 QV_EXP_TWOBAR=1 QV_EXP_NC=4
  run ndnorm_$i 1 QV_ABL_NODELTA=add_rms_norm
done
run one8 8 X=1; run two8 8 QV_EXP_TWOBAR=1; run one4 8 QV_EXP_NC=4
run one8 32 X=1; run two8 32 QV_EXP_TWOBAR=1; run one8 64 X=1
tar czf $OUT/extra.tgz -C /tmp/x_logs . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
