# Source THERE (one H200) from a script run on the GPU machine, after the build: bench_switch NAME BS
# VAR=VALUE... [bench flags...] runs the 7B decode bench of ./build-gpu/quiver (LoRA against
# the base model, every request on its own adapter, r=16, bf16 stacks) with those
# environment switches (X=1 for none), logs to $BENCH_LOGS/NAME_bBS.log and prints the two decode-step
# p50s. Runs starting later than $BENCH_UNTIL seconds after $T0 are skipped, so the script
# ends inside the machine's time limit. Interleave the switches' runs: the machine drifts.
: "${BENCH_LOGS:=/tmp/x_logs}" "${BENCH_UNTIL:=500}" "${T0:=$SECONDS}"
mkdir -p "$BENCH_LOGS"
bench_switch() {
  local name=$1 bs=$2 vars=()
  shift 2
  while [ $# -gt 0 ] && [[ $1 == *=* ]]; do vars+=("$1"); shift; done
  [ $((SECONDS - T0)) -gt "$BENCH_UNTIL" ] && return
  env "${vars[@]}" timeout 60 ./build-gpu/quiver bench --model bench/configs/llama-2-7b --load-format dummy \
    --dtype bfloat16 --device cuda --lora-rank 16 --lora-dtype bfloat16 --batch-size "$bs" --input-len 128 \
    --output-len 64 --num-adapters "$bs" --compare base --num-iters 1 --max-num-seqs "$bs" \
    --kv-cache-memory 16GiB "$@" >"$BENCH_LOGS/${name}_b$bs.log" 2>&1
  echo "b$bs $name (LoRA, base): $(grep -E '^  decode ' "$BENCH_LOGS/${name}_b$bs.log" |
    sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ') at $((SECONDS - T0)) s"
}
