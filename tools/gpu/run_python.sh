#!/usr/bin/env bash
# Run THERE (one H200): build the Python package with CUDA (build-gpu, as build_tree.sh),
# run tests/python with QUIVER_TEST_DEVICE=cuda, then bench/python_generate.py on the GPU.
# Logs and the benchmark record go to $OUT (default /tmp/quiver_out).
#   PY_BENCH_FLAGS  extra flags for the benchmark (default: batch 64, input 128, output 128,
#                   4 adapters, 6 pairs)
# pytest and pybind11 come from the machine when it has them, else from the Debian packages
# tools/gpu/fetch_deps.sh put in .deps/ (taken along to the GPU machine).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/quiver_out}"
mkdir -p "$OUT"
[ -d .deps/debs ] && source tools/gpu/setup_deps.sh
root=$PWD/.deps/root
extra=()
if ! python3 -c "import pybind11" 2>/dev/null && [ -d "$root/usr/lib/cmake/pybind11" ]; then
  extra+=(-Dpybind11_DIR="$root/usr/lib/cmake/pybind11")
fi
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DQUIVER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DQUIVER_SERVER=OFF -DPython_EXECUTABLE="$(command -v python3)" "${extra[@]}" >"$OUT/python_build.log" 2>&1 &&
  cmake --build build-gpu -j16 --target quiver python >>"$OUT/python_build.log" 2>&1 ||
  { grep -m5 -B2 -A5 -i error "$OUT/python_build.log" || tail -20 "$OUT/python_build.log"; exit 1; }
grep "quiver: " "$OUT/python_build.log"
export PYTHONPATH=$PWD/build-gpu/python
if ! python3 -c "import pytest" 2>/dev/null; then
  PYTHONPATH=$PYTHONPATH:$root/usr/lib/python3/dist-packages
fi
QUIVER_TEST_DEVICE=cuda QUIVER_BINARY=$PWD/build-gpu/quiver QUIVER_SOURCE_DIR=$PWD \
  timeout 300 python3 -m pytest -q -p no:cacheprovider -rs tests/python >"$OUT/python_tests.log" 2>&1
echo "pytest rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed|skipped" "$OUT/python_tests.log" | tail -25
# shellcheck disable=SC2086
timeout 180 python3 bench/python_generate.py --device cuda --quiver build-gpu/quiver \
  ${PY_BENCH_FLAGS:---batch-size 64 --input-len 128 --output-len 128 --num-adapters 4 --num-iters 6} \
  --json-output "$OUT/python_generate_cuda.json" >"$OUT/python_bench.log" 2>&1
rc=$?
echo "bench rc=$rc"; grep -E "python LLM|end-to-end|output tok/s" "$OUT/python_bench.log"
[ $rc -eq 0 ] || tail -5 "$OUT/python_bench.log"
