#!/usr/bin/env bash
# Run THERE (the GPU machine), from anywhere in the repo: builds the CUDA backend's tests and
# benchmark, runs the op tests (every case prints its error), optionally under
# compute-sanitizer, then the benchmark. Logs and the benchmark JSON go to $OUT; the last
# lines printed are a short summary.
#   bash tools/gpu/run_cuda_ops.sh              # build + tests + benchmark
#   SANITIZE=1 bash tools/gpu/run_cuda_ops.sh   # also memcheck + racecheck the LoRA/attention tests
#   BENCH=0 bash tools/gpu/run_cuda_ops.sh      # tests only
# PCRE2/xxhash headers are missing there: carry .deps/ (tools/gpu/fetch_deps.sh, run here first).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/quiver_out}"
mkdir -p "$OUT"
[ -d .deps/debs ] && [ -f tools/gpu/setup_deps.sh ] && source tools/gpu/setup_deps.sh
build=build-gpu
tests=(test_cuda_ops test_cuda_attention test_cuda_project test_cuda_lora_delta)

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv,noheader | tee "$OUT/gpu.txt"
git log -1 --format='commit %h %s' 2>/dev/null | tee -a "$OUT/gpu.txt"

if ! cmake -S . -B "$build" -G Ninja -DQUIVER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DQUIVER_SERVER=OFF \
    >"$OUT/configure.log" 2>&1; then
  tail -30 "$OUT/configure.log"; echo "configure FAILED"; exit 1
fi
if ! cmake --build "$build" --target "${tests[@]}" bench_cuda_ops -j "$(nproc)" >"$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -40; echo "build FAILED"; exit 1
fi

status=0
for t in "${tests[@]}"; do
  "./$build/$t" >"$OUT/$t.log" 2>&1 || status=1
  echo "== $t: $(grep -cE ' ok$' "$OUT/$t.log") cases ok, $(grep -c ' FAIL$' "$OUT/$t.log") cases FAIL; $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/$t.log" | tr '\n' ' ')"
  grep -E ' FAIL$' "$OUT/$t.log" | head -15
done

if [ "${SANITIZE:-0}" = 1 ]; then
  # A few cases per kernel family: the sanitizers slow kernels down 10-100x.
  declare -A filter=([test_cuda_ops]='*Matmul*Gemv*:*RmsNorm*' [test_cuda_project]='*DecodeSizes*' [test_cuda_lora_delta]='*AddRmsNorm*'
                     [test_cuda_attention]='*DecodeLooseBounds*:*PrefillLooseBounds*')
  for t in "${tests[@]}"; do
    for tool in memcheck racecheck; do
      compute-sanitizer --tool "$tool" --error-exitcode 3 "./$build/$t" --gtest_filter="${filter[$t]}" \
        >"$OUT/$t.$tool.log" 2>&1 || status=1
      echo "== $tool $t: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$t.$tool.log" | tail -1)"
    done
  done
fi

if [ "${BENCH:-1}" = 1 ]; then
  "./$build/bench_cuda_ops" --benchmark_out="$OUT/bench_cuda_ops.json" --benchmark_out_format=json \
    >"$OUT/bench_cuda_ops.log" 2>&1 || status=1
  grep -E "^BM_" "$OUT/bench_cuda_ops.log" | sed -E 's/\/manual_time//; s/ +/ /g' | cut -c1-200
fi
echo "run_cuda_ops.sh: exit status $status (logs in $OUT)"
exit "$status"
