#!/usr/bin/env bash
# Run THERE (the GPU machine, python3 with tokenizers + transformers, no internet), from the
# repo root: writes HF tokenizers' reference outputs for every tokenizer into
# $OUT/tokenizer_expected/ (compared here with the committed tests/fixtures/tokenizer_expected),
# then times HF tokenizers and quiver's bench_tokenizer on the same 1 MiB of text, one core.
# Carry: tests/tokenizer_data/npm (tools/fetch_tokenizers.sh) and .deps (tools/gpu/fetch_deps.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/quiver_out}"
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
status=0
lscpu | grep -E 'Model name' | tee "$OUT/cpu.txt"
taskset -c 0 python3 -u tools/make_tokenizer_fixtures.py --out "$OUT/tokenizer_expected" 2>&1 | tee "$OUT/make_tokenizer_fixtures.log" || status=1
for f in "$OUT"/tokenizer_expected/*.jsonl; do
  committed="tests/fixtures/tokenizer_expected/$(basename "$f")"
  if [ ! -f "$committed" ]; then echo "== $(basename "$f"): new (no committed file)";
  elif cmp -s "$f" "$committed"; then echo "== $(basename "$f"): identical to the committed file";
  else echo "== $(basename "$f"): DIFFERS from the committed file"; status=1; fi
done

[ -d .deps/debs ] && [ -f tools/gpu/setup_deps.sh ] && source tools/gpu/setup_deps.sh
build=build-gpu-tok
if cmake -S . -B "$build" -G Ninja -DQUIVER_CUDA=OFF -DQUIVER_SERVER=OFF >"$OUT/configure.log" 2>&1 &&
   cmake --build "$build" --target bench_tokenizer test_tokenizer_hf -j "$(nproc)" >"$OUT/build.log" 2>&1; then
  taskset -c 0 "./$build/bench_tokenizer" 2>&1 | tee "$OUT/bench_tokenizer.txt" || status=1
  "./$build/test_tokenizer_hf" --gtest_brief=1 2>&1 | tail -3
else
  grep -E "error|FAILED" "$OUT/configure.log" "$OUT/build.log" | head -30; echo "build FAILED"; status=1
fi
echo "run_tokenizer.sh: exit status $status (logs in $OUT)"
exit "$status"
