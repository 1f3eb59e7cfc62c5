#!/usr/bin/env bash
# Run THERE (one H200): the GPU checks and the 7B numbers of bench/RESULTS.md, each part
# switched on by a variable (see bench/RESULTS.md, "Re-running"):
#   TARGETS   GPU test binaries to build and run (default test_cuda_graphs)
#   FIX       every HF fixture on CUDA vs HF and vs the CPU (run_engine_fixtures.sh)
#   VERIFY    `quiver verify` graph vs eager on two fixtures
#   NCU       per-kernel times of the first eager forward passes (NCU_BS, NCU_IN, NCU_SKIP,
#             NCU_COUNT, NCU_T: its time limit, 200 s; by default a 2,048-token prefill step with 8 adapters). NCU_ADAPTERS
#             (default NCU_BS) and NCU_KERNELS (a kernel-name regex) narrow it: the throughput case's
#             decode LoRA is NCU_BS=256 NCU_IN=1 NCU_ADAPTERS=64 NCU_KERNELS='shrink|expand'
#             NCU_COUNT=8 (one layer: 256 one-token prompts, four per adapter, sorted by slot).
#             NCU_DETAIL=1 adds NCU_DETAIL_METRICS (bytes, occupancy, stalls) per kernel.
#             NCU_KV (default 16GiB): the KV cache, e.g. 40GiB for the throughput case's decode at real
#             contexts: NCU_BS=256 NCU_IN=256 NCU_ADAPTERS=64 NCU_OUTLEN=8 runs a prefill
#             step and 4 mixed ones, as the throughput case does; forwards 6 and 7 decode all 256.
#             NCU_OUTLEN (default 2): output tokens per request.
#             NCU_SHOW (default "0 1 2"): which forwards the summary lists (0: kernels before
#             the first embedding, i.e. the dummy weights' initialisation)
#   BENCHC    256 requests over 64 adapters with --trace (BENCHC_OUT output tokens)
#   BENCHAB   LoRA vs base at batch 1/8/32/64 (BENCHAB_BS, BENCHAB_OUT, BENCHAB_FLAGS);
#             BENCHAB_EAGER adds batch 1 with --enforce-eager
#   VOCAB     what vocabulary adapters cost in decode (--lora-vocab none, added=4, lm_head, lora) at
#             batch 1 and 32 (VOCAB_BS), each request on its own r=16 adapter (whole lm_head
#             replacements: 4 adapters at most, 262 MB of bf16 rows each), LoRA vs base
#   SERVE     serving at GPU scale with the default memory plan (no memory flags): 256
#             requests over 64 adapters (prompt 256, output 128) with the bf16 and the fp8 KV
#             cache, 1,024 over 128 adapters (prompt 512, output 256, fp8), and the online mode
#             (SERVE_RATES, requests per second, SERVE_ONLINE_N requests over 64 adapters)
# Chat-template expectations are re-rendered there with `python3 tools/make_chat_fixtures.py`.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${NCU_DETAIL_METRICS:=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,launch__registers_per_thread,launch__occupancy_limit_registers,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,dram__throughput.avg.pct_of_peak_sustained_elapsed}"
: "${OUT:=/tmp/quiver_out}"
# Logs go to /tmp/diag_logs and come back packed in $OUT/logs.tgz (few files: the device returns
# only a limited number).
FINAL_OUT=$OUT
OUT=/tmp/diag_logs
rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL_OUT"
trap 'tar czf "$FINAL_OUT/logs.tgz" -C "$OUT" . 2>/dev/null' EXIT
gpu_tools=$PWD/tools/gpu  # this checkout's, also for SRC trees
# SRC=DIR: build that tree instead (e.g. build-src, a `git archive HEAD` carried along, so
# others' unfinished files in the working tree stay out of the build).
if [ -n "${SRC:-}" ]; then
  [ -e "$SRC/.deps" ] || ln -s "$PWD/.deps" "$SRC/.deps"
  cd "$SRC"
fi
mkdir -p "$OUT"
build=build-gpu  # where build_tree.sh builds
[ -d .deps/debs ] && source tools/gpu/setup_deps.sh
t0=$SECONDS
bash "$gpu_tools/build_tree.sh" . "$OUT/build.log" ${TARGETS:-test_cuda_graphs} ||
  { grep -m5 -B2 -A5 error "$OUT/build.log" || tail -20 "$OUT/build.log"; exit 1; }
echo "build $((SECONDS - t0))s"
for t in ${TARGETS:-test_cuda_graphs}; do
  timeout 120 ./$build/$t >"$OUT/$t.log" 2>&1; echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$t.log" | tr '\n' ' ')"
  grep -E "Failure|Expected|Which is|error" "$OUT/$t.log" | head -20
done
if [ -n "${FIX:-}" ]; then  # every HF fixture through quiver on CUDA vs HF, and vs the CPU
  mkdir -p "$OUT/fixtures"
  timeout 240 env OUT="$OUT/fixtures" BUILD=$build bash tools/gpu/run_engine_fixtures.sh >"$OUT/fixtures.log" 2>&1
  echo "fixtures rc=$?"; grep -vE "^\s*$" "$OUT/fixtures.log" | tail -40
fi
if [ -n "${VERIFY:-}" ]; then  # graph vs eager, bitwise, on two fixtures with all their adapters
  for m in llama3_bf16 llama_gqa; do
    fx=tests/fixtures/$m
    loras=()
    for a in "$fx"/adapters/*; do loras+=(--lora "$(basename "$a")=$a"); done
    timeout 60 ./$build/quiver verify --model "$fx" "${loras[@]}" --max-lora-rank 64 --max-loras 8 --device cuda \
      --input "$fx/requests.jsonl" >"$OUT/verify_$m.log" 2>&1
    echo "verify $m rc=$?"; grep -E "^verify:|^graph run|^eager run" "$OUT/verify_$m.log"
  done
fi
B=(./$build/quiver bench --model bench/configs/llama-2-7b --load-format dummy --dtype bfloat16 --device cuda --lora-rank 16)
if [ -n "${NCU:-}" ]; then  # defaults: the first step is one 2,048-token prefill over 8 adapters
  kfilter=()
  [ -n "${NCU_KERNELS:-}" ] && kfilter=(--kernel-name "regex:$NCU_KERNELS")
  # NCU_DETAIL: per kernel, what bounds it (bytes, occupancy, warp stalls) instead of time only.
  what=(--metrics gpu__time_duration.sum)
  [ -n "${NCU_DETAIL:-}" ] && what=(--metrics "gpu__time_duration.sum,$NCU_DETAIL_METRICS")
  timeout ${NCU_T:-200} ncu --clock-control none "${what[@]}" --csv --launch-skip ${NCU_SKIP:-0} \
    --launch-count ${NCU_COUNT:-1400} "${kfilter[@]}" "${B[@]}" --batch-size ${NCU_BS:-8} --input-len ${NCU_IN:-256} \
    --output-len ${NCU_OUTLEN:-2} --num-adapters ${NCU_ADAPTERS:-${NCU_BS:-8}} --num-iters 1 --warmup-steps 0 --max-num-seqs ${NCU_BS:-8} --kv-cache-memory ${NCU_KV:-16GiB} \
    --enforce-eager --lora-dtype bfloat16 >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
  echo "ncu rc=$? $(wc -l <"$OUT/ncu.csv") lines"; tail -3 "$OUT/ncu.err"
  # Per forward pass (each starts with the embedding kernel): total and the largest kernels.
  # With NCU_DETAIL, every profiled kernel's metrics instead.
  python3 - "$OUT/ncu.csv" "${NCU_DETAIL:-}" "${NCU_SHOW:-0 1 2}" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ki = hdr.index("Kernel Name"); vi = hdr.index("Metric Value"); ui = hdr.index("Metric Unit")
mi = hdr.index("Metric Name"); ii = hdr.index("ID"); gi = hdr.index("Grid Size")
if sys.argv[2]:
    kernels = collections.OrderedDict()
    for r in rows:
        kernels.setdefault(r[ii], [r[ki].split("(")[0][-60:] + " grid " + r[gi]]).append(f"{r[mi]} = {r[vi]} {r[ui]}")
    for lines in kernels.values():
        print(lines[0]); print("\n".join("    " + l for l in lines[1:]))
    sys.exit(0)
rows = [r for r in rows if r[mi] == "gpu__time_duration.sum"]
steps = []
for r in rows:
    name = r[ki].split("(")[0]
    if "embedding_kernel" in name or not steps:
        steps.append(collections.defaultdict(lambda: [0, 0.0]))
    v = float(r[vi].replace(",", "")); u = r[ui]
    us = v / 1000 if u in ("ns", "nsecond") else v if u in ("us", "usecond") else v * 1000  # ncu 2025 says "ns"
    steps[-1][name[-70:]][0] += 1; steps[-1][name[-70:]][1] += us
for i in [int(w) for w in sys.argv[3].split()]:
    if i >= len(steps): continue
    agg = steps[i]
    tot = sum(a[1] for a in agg.values())
    print(f"forward {i}: {tot:.1f} us over {sum(a[0] for a in agg.values())} kernels (the last may be cut off)")
    for k, (c, us) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:15]:
        print(f"{us:10.1f} us {c:6d} x {us / c:8.2f} us  {k}")
PY
fi
if [ -n "${BENCHC:-}" ]; then
  timeout ${BENCHC_T:-150} "${B[@]}" --batch-size 256 --input-len 256 --output-len ${BENCHC_OUT:-32} --num-adapters 64 \
    --num-iters 1 --warmup-steps 2 --kv-cache-memory 56GiB --trace --lora-dtype bfloat16 \
    --json-output "$OUT/benchc.json" >"$OUT/benchc.log" 2>&1
  echo "benchc rc=$?"; grep -v "^\[step" "$OUT/benchc.log" | tail -12 | cut -c1-300
  # step kind, tokens and time of the first 40 steps
  grep "^\[step" "$OUT/benchc.log" | head -40 | sed -E 's/adapters=\[[^]]*\]//' | cut -c1-200
fi
if [ -n "${BENCHAB:-}" ]; then  # the decode benchmark: LoRA vs base at batch 1/8/32/64, short
  for bs in ${BENCHAB_BS:-1 8 32 64}; do
    timeout 120 "${B[@]}" --batch-size $bs --input-len 128 --output-len ${BENCHAB_OUT:-64} --num-adapters $bs \
      --compare base --num-iters 2 --max-num-seqs $bs --kv-cache-memory 16GiB ${BENCHAB_FLAGS:-} \
      --json-output "$OUT/bench_b$bs.json" >"$OUT/bench_b$bs.log" 2>&1
    echo "bench bs=$bs rc=$?"
    grep -E "decode|ratio|lora/base|x0|x1" "$OUT/bench_b$bs.log" | head -8
  done
  if [ -n "${BENCHAB_EAGER:-}" ]; then  # eager vs graphs at batch 1
    timeout 120 "${B[@]}" --batch-size 1 --input-len 128 --output-len ${BENCHAB_OUT:-64} --num-adapters 1 \
      --compare base --num-iters 2 --max-num-seqs 1 --kv-cache-memory 16GiB ${BENCHAB_FLAGS:-} --enforce-eager \
      --json-output "$OUT/bench_b1_eager.json" >"$OUT/bench_b1_eager.log" 2>&1
    echo "bench bs=1 eager rc=$?"; grep -E "decode " "$OUT/bench_b1_eager.log" | head -4
  fi
fi
if [ -n "${VOCAB:-}" ]; then  # vocabulary adapters' decode cost, each against the base in the same process
  for bs in ${VOCAB_BS:-1 32}; do
    for v in none added=4 lm_head lora; do
      na=$bs; [ $v = lm_head ] && [ $bs -gt 4 ] && na=4
      timeout 150 "${B[@]}" --batch-size $bs --input-len 128 --output-len 64 --num-adapters $na --lora-vocab $v \
        --lora-dtype bfloat16 --compare base --num-iters 2 --max-num-seqs $bs --kv-cache-memory 16GiB \
        --json-output "$OUT/vocab_b${bs}_${v/=/}.json" >"$OUT/vocab_b${bs}_${v/=/}.log" 2>&1
      echo "vocab bs=$bs $v rc=$?"; grep -E "LoRA adapter 'bench-0'|quiver: memory|decode |lora/base" "$OUT/vocab_b${bs}_${v/=/}.log" | head -5 | cut -c1-300
    done
  done
fi
if [ -n "${SERVE:-}" ]; then
  S=("${B[@]}" --lora-dtype bfloat16 --num-iters 1 --warmup-steps 2)
  for kv in auto fp8; do
    timeout 200 "${S[@]}" --batch-size 256 --input-len 256 --output-len 128 --num-adapters 64 --kv-cache-dtype $kv \
      --json-output "$OUT/serve256_$kv.json" >"$OUT/serve256_$kv.log" 2>&1
    echo "serve 256x64 kv=$kv rc=$?"; grep -E "quiver: memory|decode |end-to-end|ceiling" "$OUT/serve256_$kv.log" | head -6 | cut -c1-400
  done
  timeout 300 "${S[@]}" --batch-size 1024 --input-len 512 --output-len 256 --num-adapters 128 --max-loras 128 \
    --kv-cache-dtype fp8 --json-output "$OUT/serve1024.json" >"$OUT/serve1024.log" 2>&1
  echo "serve 1024x128 fp8 rc=$?"; grep -E "quiver: memory|prefill|decode |end-to-end|preempt" "$OUT/serve1024.log" | head -8 | cut -c1-400
  for rate in ${SERVE_RATES:-8 16 32}; do
    timeout 200 "${S[@]}" --num-requests ${SERVE_ONLINE_N:-512} --request-rate $rate --input-len 256 --output-len 128 \
      --num-adapters 64 --kv-cache-dtype fp8 --json-output "$OUT/online_$rate.json" >"$OUT/online_$rate.log" 2>&1
    echo "online rate=$rate rc=$?"; grep -iE "ttft|itl|throughput|output tok" "$OUT/online_$rate.log" | head -6 | cut -c1-300
  done
fi
echo "total $((SECONDS - t0))s"
