#!/usr/bin/env bash
# Run THERE (one H200), from the repo root, carrying .deps (tools/gpu/fetch_deps.sh, run here):
# the one-call check of CUDA graphs + LoRA and the 7B numbers, inside a fixed time budget.
#   build (quiver + GPU tests) -> GPU op smoke tests -> test_cuda_graphs -> every HF fixture
#   through `quiver generate` eager and graph vs HF -> `quiver verify` on two fixtures ->
#   7B `quiver bench` (dummy bf16 weights): (a) batch 1 one r16 adapter, graphs vs eager,
#   each vs base; (b) every request on its own adapter vs base at batch 8 / 64 / 32;
#   (c) 256 requests over 64 adapters, prompt 256, output 128.
# Every step runs under `timeout`, and steps that no longer fit in BUDGET seconds (from the
# start) are skipped. One summary line per step goes to $OUT/summary.txt as it finishes
# and all logs are re-packed into $OUT/final.tgz after each step (two files in $OUT, so
# a killed run still brings back what it had). The summary is printed again at the end.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/quiver_out}"
BUDGET=${BUDGET:-370}
LAST_SECS=0
build=${BUILD:-build-gpu}
logs=/tmp/quiver_final_logs
rm -rf "$logs" && mkdir -p "$logs" "$OUT"
summary="$OUT/summary.txt"
: >"$summary"

left() { echo $((BUDGET - SECONDS)); }
pack() { tar czf "$OUT/final.tgz" -C "$logs" . 2>/dev/null; }
note() { echo "$*" | tee -a "$summary"; pack; }
# step NAME NEED MAXSECS CMD...: runs CMD (logging to $logs/NAME.log) if at least NEED seconds
# remain, under a timeout of min(MAXSECS, what remains - 5); returns CMD's status.
step() {
  local name=$1 need=$2 max=$3; shift 3
  local rem; rem=$(left)
  if (( rem < need )); then note "SKIP $name: ${rem}s left, needs ~${need}s"; return 99; fi
  local t=$(( max < rem - 5 ? max : rem - 5 )) t0=$SECONDS
  timeout "$t" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  LAST_SECS=$((SECONDS - t0))
  (( rc == 124 )) && echo "(timed out after ${t}s)" >>"$logs/$name.log"
  return $rc
}

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv,noheader
  git log -1 --format='commit %h %s' 2>/dev/null
} >"$logs/machine.txt" 2>&1
note "machine: $(head -1 "$logs/machine.txt") | $(sed -n 2p "$logs/machine.txt")"

[ -d .deps/debs ] && source tools/gpu/setup_deps.sh
step configure 60 60 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQUIVER_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DQUIVER_SERVER=OFF
rc=$?; (( rc != 0 )) && { note "FAIL configure (rc $rc): $(tail -3 "$logs/configure.log" | tr '\n' ' ')"; cat "$summary"; exit 1; }
step build 100 230 cmake --build "$build" -j16 --target quiver test_cuda_graphs
rc=$?
if (( rc != 0 )); then
  note "FAIL build (rc $rc, ${LAST_SECS}s): $(grep -m3 -E 'error|FAILED' "$logs/build.log" | cut -c1-300 | tr '\n' ' ')"
  cat "$summary"; exit 1
fi
note "OK build (${LAST_SECS}s)"

# ---- tests ------------------------------------------------------------------------------
gtest_line() {  # name: "N passed, M failed, K skipped" from gtest's closing lines
  local l=$logs/$1.log n
  for k in PASSED FAILED SKIPPED; do
    n=$(grep -E "^\[ +$k +\] [0-9]+ tests?[,.]" "$l" | grep -oE '[0-9]+' | head -1)
    printf '%s %s ' "${n:-0}" "${k,,}"
  done
}
# The op tests (2055 cases) passed in full on the H200 earlier; graph tests come first here.
step test_cuda_graphs 30 90 "./$build/test_cuda_graphs"
rc=$?
if (( rc != 99 )); then
  note "$([ $rc = 0 ] && echo OK || echo "FAIL rc $rc") test_cuda_graphs (${LAST_SECS}s): $(gtest_line test_cuda_graphs)"
  grep -E "graph keys|Failure|Expected|Which is|error" "$logs/test_cuda_graphs.log" | head -12 >>"$summary"
fi

# ---- HF fixtures, eager and graph -------------------------------------------------------
mkdir -p "$logs/fixtures"
step engine_fixtures 30 90 env OUT="$logs/fixtures" BUILD="$build" bash tools/gpu/run_engine_fixtures.sh
rc=$?
if (( rc != 99 )); then
  note "$([ $rc = 0 ] && echo OK || echo "FAIL rc $rc") engine_fixtures vs HF (${LAST_SECS}s): $(grep -cE ': ok$|ok$' "$logs/engine_fixtures.log") ok lines"
  grep -vE "^\s*$" "$logs/engine_fixtures.log" | tail -8 >>"$summary"
  grep -h "captured" "$logs"/fixtures/*_graph.err 2>/dev/null | head -2 >>"$summary"
fi

# ---- verify: graph vs eager, bitwise -----------------------------------------------------
for m in llama_gqa llama3_bf16; do
  fx=tests/fixtures/$m
  loras=()
  for a in "$fx"/adapters/*; do loras+=(--lora "$(basename "$a")=$a"); done
  step "verify_$m" 15 45 "./$build/quiver" verify --model "$fx" "${loras[@]}" --max-lora-rank 64 --max-loras 8 \
    --device cuda --input "$fx/requests.jsonl"
  rc=$?; (( rc == 99 )) && continue
  line=$(grep -E '^verify:' "$logs/verify_$m.log" | cut -c1-200)
  note "$([ $rc = 0 ] && echo OK || echo "FAIL rc $rc") verify $m (${LAST_SECS}s): ${line:-$(tail -2 "$logs/verify_$m.log" | tr '\n' ' ' | cut -c1-200)}"
  grep -E "^graph run|^eager run" "$logs/verify_$m.log" >>"$summary"
done

# ---- 7B benchmarks (dummy bf16 weights) ----------------------------------------------------
bench() {  # name need max flags...
  local name=$1 need=$2 max=$3; shift 3
  step "bench_$name" "$need" "$max" "./$build/quiver" bench --model bench/configs/llama-2-7b --load-format dummy \
    --dtype bfloat16 --device cuda --lora-rank 16 --json-output "$logs/bench_$name.json" "$@"
  local rc=$?
  (( rc == 99 )) && return
  local line
  line=$(python3 - "$logs/bench_$name.json" <<'PY' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))
d = r["best"]["decode"]
s = f'decode {d["tokens_per_s"]:.1f} tok/s, step p50 {d["step_ms"]["p50"]:.3f} ms (min {d["step_ms"]["min"]:.3f}), ' \
    f'{100 * d["fraction_of_ceiling"]:.0f}% of {d["ceiling_gb_per_s"]:.0f} GB/s; prefill {r["best"]["prefill"]["tokens_per_s"]:.0f} tok/s; ' \
    f'e2e {r["best"]["end_to_end"]["output_tokens_per_s"]:.0f} out tok/s'
x = r.get("ratio_main_over_compare")
if x:
    s += f'; lora/base decode tok/s x{x["decode_tokens_per_s"]["median"]:.3f}, step p50 x{x["decode_step_ms_p50"]["median"]:.3f}'
print(s)
PY
)
  note "$([ $rc = 0 ] && echo OK || echo "FAIL rc $rc") bench $name (${LAST_SECS}s): ${line:-$(tail -2 "$logs/bench_$name.log" | tr '\n' ' ' | cut -c1-200)}"
  grep -h "captured" "$logs/bench_$name.log" | head -1 >>"$summary"
}
# KV budget per case: 7B bf16 K+V is 0.5 MiB per token (the default 1 GiB holds 2048 tokens).
b1=(--batch-size 1 --input-len 128 --output-len 128 --num-adapters 1 --compare base --num-iters 2 --max-num-seqs 1
    --kv-cache-memory 2GiB)
bench a_b1_lora1_graph 40 75 "${b1[@]}"
bench a_b1_lora1_eager 40 75 "${b1[@]}" --enforce-eager
bench b_b8_lora8 40 75 --batch-size 8 --input-len 128 --output-len 64 --num-adapters 8 --compare base --num-iters 2 \
  --max-num-seqs 8 --kv-cache-memory 4GiB
bench b_b64_lora64 60 100 --batch-size 64 --input-len 128 --output-len 64 --num-adapters 64 --compare base \
  --num-iters 2 --max-num-seqs 64 --kv-cache-memory 16GiB
bench c_256req_64ad 60 110 --batch-size 256 --input-len 256 --output-len 128 --num-adapters 64 --num-iters 1 \
  --warmup-steps 2 --kv-cache-memory 56GiB
bench b_b32_lora32 45 80 --batch-size 32 --input-len 128 --output-len 64 --num-adapters 32 --compare base --num-iters 2 \
  --max-num-seqs 32 --kv-cache-memory 8GiB

# ---- chat templates through transformers itself (cheap) -------------------------------------
step chat_fixtures 15 30 python3 tools/make_chat_fixtures.py
rc=$?
if (( rc != 99 )); then
  note "$([ $rc = 0 ] && echo OK || echo "FAIL rc $rc") chat fixtures via transformers: $(git status --short tests/fixtures/chat_expected | wc -l) files changed"
  tar czf "$logs/chat_expected.tgz" -C tests/fixtures chat_expected
fi

note "done in ${SECONDS}s (budget ${BUDGET}s); logs in final.tgz"
echo "================ summary ================"
cat "$summary"
