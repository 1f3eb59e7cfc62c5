#!/usr/bin/env bash
# Runs one libFuzzer target with ASan + UBSan for a bounded time. Needs Debian's clang;
# CTest runs each target briefly (fuzz_io, fuzz_openai_parser, fuzz_torch_bin, fuzz_tokenizer) and skips
# (77) without it.
#
#   tools/fuzz.sh TARGET [SECONDS=60] [BUILD_DIR=build-fuzz]
#
#   io             tests/fuzz/fuzz_io_readers.cc: safetensors header, config.json,
#                  adapter_config.json (src/core + src/io), seeds tests/fuzz/io_seeds
#   openai_parser  tests/fuzz/fuzz_openai_parser.cc: the OpenAI request parsers and the tool
#                  call parsers (whole and streamed),
#                  seeds tests/fuzz/openai_parser_seeds
#   torch_bin      tests/fuzz/fuzz_torch_bin.cc: the torch.save reader (zip, restricted
#                  unpickler), seeds tests/fuzz/torch_bin_seeds (tools/make_torch_bin.py seeds)
#   tokenizer      tests/fuzz/fuzz_tokenizer.cc: tokenizer.json and chat templates (src/tokenizer),
#                  seeds tests/fuzz/tokenizer_seeds
#   structured     tests/fuzz/fuzz_structured.cc: structured outputs' regexes, JSON schemas and
#                  choice lists compiled to automata (src/structured), seeds tests/fuzz/structured_seeds
#
# The corpus grows in BUILD_DIR/TARGET_corpus; a finding leaves BUILD_DIR/crash-* (or
# leak-*, timeout-*) and a non-zero exit status. The binary is rebuilt only when a source
# is newer.
set -euo pipefail
TARGET=${1:?usage: fuzz.sh io|openai_parser|torch_bin|tokenizer|structured [SECONDS] [BUILD_DIR]}
SECONDS_TO_RUN=${2:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${3:-$ROOT/build-fuzz}
CXX=${CXX_FUZZ:-clang++}
command -v "$CXX" >/dev/null || { echo "SKIP: $CXX not found"; exit 77; }


case "$TARGET" in
  io)
    SOURCES=("$ROOT"/tests/fuzz/fuzz_io_readers.cc "$ROOT"/src/core/*.cc "$ROOT"/src/io/*.cc)
    SEEDS=$ROOT/tests/fuzz/io_seeds
    LIBS=($(pkg-config --cflags --libs libpcre2-8) -lpthread)
    RUN=(-max_len=16384)
    ;;
  openai_parser)
    SOURCES=("$ROOT"/tests/fuzz/fuzz_openai_parser.cc "$ROOT"/src/server/openai_protocol.cc
             "$ROOT"/src/server/openai_response.cc "$ROOT"/src/server/request_fields.cc
             "$ROOT"/src/structured/request_fields.cc "$ROOT"/src/io/json_fields.cc "$ROOT"/src/io/json_util.cc
             "$ROOT"/src/tokenizer/chat_content.cc "$ROOT"/src/server/tool_calls.cc "$ROOT"/src/server/tool_stream.cc
             "$ROOT"/src/server/pythonic_calls.cc "$ROOT"/src/server/responses_api.cc
             "$ROOT"/src/tokenizer/utf8.cc "$ROOT"/src/tokenizer/stop_checker.cc)
    SEEDS=$ROOT/tests/fuzz/openai_parser_seeds
    LIBS=()
    RUN=(-max_len=8192 -dict="$ROOT/tests/fuzz/openai_parser.dict")
    ;;
  torch_bin)
    SOURCES=("$ROOT"/tests/fuzz/fuzz_torch_bin.cc "$ROOT"/src/io/torch_file.cc "$ROOT"/src/io/torch_pickle.cc
             "$ROOT"/src/io/zip_reader.cc "$ROOT"/src/io/mapped_file.cc)
    SEEDS=$ROOT/tests/fuzz/torch_bin_seeds
    LIBS=()
    RUN=(-max_len=16384 -dict="$ROOT/tests/fuzz/torch_bin.dict")
    ;;
  tokenizer)
    SOURCES=("$ROOT"/tests/fuzz/fuzz_tokenizer.cc "$ROOT"/src/core/*.cc "$ROOT"/src/tokenizer/*.cc "$ROOT"/src/io/json_util.cc
             "$ROOT"/src/io/path_allowlist.cc)
    SEEDS=$ROOT/tests/fuzz/tokenizer_seeds
    LIBS=($(pkg-config --cflags --libs libpcre2-8) -lpthread)
    RUN=(-max_len=16384)
    ;;
  structured)
    SOURCES=("$ROOT"/tests/fuzz/fuzz_structured.cc "$ROOT"/src/core/check.cc "$ROOT"/src/structured/regex_parser.cc
             "$ROOT"/src/structured/json_schema_regex.cc "$ROOT"/src/structured/dfa.cc
             "$ROOT"/src/structured/grammar_cache.cc "$ROOT"/src/tokenizer/utf8.cc)
    SEEDS=$ROOT/tests/fuzz/structured_seeds
    LIBS=(-lpthread)
    RUN=(-max_len=4096)
    ;;
  *) echo "unknown target '$TARGET' (io, openai_parser, torch_bin, tokenizer, structured)"; exit 2 ;;
esac

mkdir -p "$BUILD/${TARGET}_corpus"
find "$SEEDS" -type f -exec cp -n {} "$BUILD/${TARGET}_corpus/" \;
# A run of a few seconds (CTest's) is mostly its build, which -O0 cuts by about a third (the
# tokenizer target: 108 against 157 s on two cores); longer runs want -O1's executions per
# second. Each level keeps its own binary.
OPT=-O1
[ "$SECONDS_TO_RUN" -le 10 ] && OPT=-O0
BIN=$BUILD/fuzz_${TARGET}${OPT}
if [ ! -x "$BIN" ] || [ -n "$(find "${SOURCES[@]}" "$ROOT"/src -newer "$BIN" -print -quit)" ]; then
  # clang 14 lacks std::source_location (core/check.h): the shim stands in for it.
  # -gline-tables-only: crash reports keep their files and lines, and a build takes a fifth
  # less than with -g (io at -O0: 92 against 113 s).
  FLAGS=(-std=c++20 "$OPT" -gline-tables-only -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
         -fno-sanitize-recover=undefined -include "$ROOT/tests/fuzz/source_location_shim.h" -I "$ROOT/src" -I "$ROOT/tests")
  # The standard headers and nlohmann/json, parsed once for all of the target's sources
  # instead of once a source: the tokenizer's 28 sources build in 96 s instead of 146 (-O0,
  # one core each), and a CTest run is mostly its build. One header a target, so that
  # targets built at once never share a file.
  PCH=$BUILD/fuzz_${TARGET}${OPT}_pch.h
  printf '#include <%s>\n' algorithm cstdint cstring functional map memory optional string string_view \
    unordered_map utility variant vector nlohmann/json.hpp > "$PCH"
  "$CXX" "${FLAGS[@]}" -x c++-header "$PCH" -o "$PCH.pch"
  "$CXX" "${FLAGS[@]}" -include-pch "$PCH.pch" "${SOURCES[@]}" "${LIBS[@]}" -o "$BIN"
fi

cd "$BUILD"
# -error_exitcode: libFuzzer's own default for a finding is 77, which is also the skip code
# CTest is given for a machine without clang, so a crash read as a skipped test.
"$BIN" -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 -error_exitcode=1 -print_final_stats=1 \
  "${RUN[@]}" "${TARGET}_corpus"
