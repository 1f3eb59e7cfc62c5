#!/usr/bin/env bash
# Session 15, call 5, branch exp/abl-s15 (7c28d49 + an ablation switch in llama.cc): in the
# decode graph, what each consumer's LoRA term costs at batch 8 and 32. QV_ABL_NODELTA=
# rope / norm / silu / all three: those consumers run their plain kernel (wrong outputs,
# timing only). Interleaved, same binary.
set -u
T0=$SECONDS
TARGETS=test_cuda_lora_delta OUT=$OUT/new timeout 200 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|^build|error" $OUT/new.txt | head -4
mkdir -p /tmp/x_logs
B=(./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16)
run() {  # name bs VAR=VALUE
  local name=$1 bs=$2 var=$3
  [ $((SECONDS - T0)) -gt 440 ] && return
  env "$var" timeout 45 "${B[@]}" --batch-size $bs --input-len 128 --output-len 64 --num-adapters $bs --compare base \
    --num-iters 1 --max-num-seqs $bs --kv-cache-memory 16GiB >/tmp/x_logs/${name}_b$bs.log 2>&1
  echo "b$bs $name (LoRA, base): $(grep -E '^  decode ' /tmp/x_logs/${name}_b$bs.log | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ') at $((SECONDS - T0)) s"
}
for i in 1 2; do
  for v in main:X=1 rope:QV_ABL_NODELTA=rope norm:QV_ABL_NODELTA=norm silu:QV_ABL_NODELTA=silu all:QV_ABL_NODELTA=rope,norm,silu; do
    run ${v%%:*}_$i 8 ${v#*:}
  done
done
for v in main:X=1 rope:QV_ABL_NODELTA=rope norm:QV_ABL_NODELTA=norm silu:QV_ABL_NODELTA=silu all:QV_ABL_NODELTA=rope,norm,silu; do
  run ${v%%:*} 32 ${v#*:}
done
tar czf $OUT/extra.tgz -C /tmp/x_logs . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
