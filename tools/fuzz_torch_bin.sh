#!/usr/bin/env bash
# Fuzzes the torch.save reader (src/io/zip_reader.cc, torch_pickle.cc, torch_file.cc) with
# libFuzzer for a bounded time. Needs Debian's clang (clang++ with -fsanitize=fuzzer); not
# part of CMake.
#
#   tools/fuzz_torch_bin.sh [SECONDS=60] [BUILD_DIR=build-fuzz]
#
# Builds BUILD_DIR/fuzz_torch_bin with ASan + UBSan, grows a corpus in
# BUILD_DIR/torch_bin_corpus (seeded from tests/fuzz/torch_bin_seeds, which
# tools/make_torch_bin.py seeds writes) and stops after SECONDS. A crash, leak or sanitizer
# report leaves BUILD_DIR/crash-* (or leak-*, timeout-*) and a non-zero exit status.
set -euo pipefail
SECONDS_TO_RUN=${1:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${2:-$ROOT/build-fuzz}
CXX=${CXX_FUZZ:-clang++}
mkdir -p "$BUILD/torch_bin_corpus"
cp -n "$ROOT"/tests/fuzz/torch_bin_seeds/* "$BUILD/torch_bin_corpus/" 2>/dev/null || true

"$CXX" -std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined -I "$ROOT/src" \
  "$ROOT/tests/fuzz/fuzz_torch_bin.cc" "$ROOT/src/io/torch_file.cc" "$ROOT/src/io/torch_pickle.cc" \
  "$ROOT/src/io/zip_reader.cc" "$ROOT/src/io/mapped_file.cc" \
  -o "$BUILD/fuzz_torch_bin"

cd "$BUILD"
./fuzz_torch_bin -max_total_time="$SECONDS_TO_RUN" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
  -dict="$ROOT/tests/fuzz/torch_bin.dict" -print_final_stats=1 torch_bin_corpus
