#!/usr/bin/env bash
# Fuzzes the OpenAI request parsers (src/server/openai_protocol.cc) with libFuzzer for a
# bounded time. Needs Debian's clang (clang++ with -fsanitize=fuzzer); not part of CMake.
#
#   tools/fuzz_server_parser.sh [SECONDS=60] [BUILD_DIR=build-fuzz]
#
# Builds BUILD_DIR/fuzz_openai_parser with ASan + UBSan, grows a corpus in
# BUILD_DIR/openai_parser_corpus (seeded from tests/fuzz/openai_parser_seeds) and stops
# after SECONDS. A crash leaves BUILD_DIR/crash-* and a non-zero exit status.
set -euo pipefail
SECONDS_TO_RUN=${1:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${2:-$ROOT/build-fuzz}
CXX=${CXX_FUZZ:-clang++}
mkdir -p "$BUILD/openai_parser_corpus"
cp -n "$ROOT"/tests/fuzz/openai_parser_seeds/* "$BUILD/openai_parser_corpus/" 2>/dev/null || true

"$CXX" -std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined -I "$ROOT/src" \
  "$ROOT/tests/fuzz/fuzz_openai_parser.cc" "$ROOT/src/server/openai_protocol.cc" "$ROOT/src/server/openai_response.cc" \
  -o "$BUILD/fuzz_openai_parser"

cd "$BUILD"
./fuzz_openai_parser -max_total_time="$SECONDS_TO_RUN" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
  -dict="$ROOT/tests/fuzz/openai_parser.dict" -print_final_stats=1 openai_parser_corpus
