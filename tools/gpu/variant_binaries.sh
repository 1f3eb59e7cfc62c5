#!/usr/bin/env bash
# Binaries that differ from a build only in a few source files, for an A/B inside one machine
# start without building a second tree (compare_trees.sh builds whole trees: minutes more).
# Each FILE=OLD pair compiles OLD with the build's own command for FILE (in parallel), and
# each TARGET is linked again with those objects ahead of its libraries, so the linker takes
# their definitions instead of the library's copy of FILE.
#   bash tools/gpu/variant_binaries.sh BUILD_DIR OUT_DIR 'TARGET...' FILE=OLD [FILE=OLD ...]
# e.g., after build_tree.sh, the old attention kernels beside the new:
#   git show main:src/backend/cuda/attention.cu > old/attention.cu     (here, then carried)
#   bash tools/gpu/variant_binaries.sh build-gpu /tmp/v 'quiver bench_cuda_attention' \
#     src/backend/cuda/attention.cu=old/attention.cu
# leaves /tmp/v/quiver and /tmp/v/bench_cuda_attention. FILE is the path as the build names
# it (relative to the source tree); OLD may have any path. Nothing in BUILD_DIR changes.
set -euo pipefail
build=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
read -r -a targets <<<"$3"
shift 3
[ $# -gt 0 ] || { echo "variant_binaries.sh: no FILE=OLD pair" >&2; exit 2; }
objects=()
pids=()
for pair in "$@"; do
  file=${pair%%=*} old=$(cd "$(dirname "${pair#*=}")" && pwd)/$(basename "${pair#*=}")
  [ -f "$old" ] || { echo "variant_binaries.sh: $old: no such file" >&2; exit 2; }
  obj=$out/$(basename "$file").o
  input=" -c [^ ]*${file//./\\.}( |$)"  # FILE as the compile command's input, dots escaped
  # The compile command of FILE in the first target's build, with its input and output swapped.
  cmd=$(cd "$build" && ninja -t commands "${targets[0]}" | grep -E "$input" | head -1 || true)
  [ -n "$cmd" ] || { echo "variant_binaries.sh: ${targets[0]} does not compile $file" >&2; exit 2; }
  cmd=$(sed -E "s#$input# -c $old #; s# -o [^ ]+# -o $obj#; s# -MD##; s# -MT [^ ]+##; s# -MF [^ ]+##" <<<"$cmd")
  (cd "$build" && eval "$cmd") >"$obj.log" 2>&1 &
  pids+=($!)
  objects+=("$obj")
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "variant_binaries.sh: compiling ${objects[$i]} failed:" >&2; tail -20 "${objects[$i]}.log" >&2; exit 1; }
done
for t in "${targets[@]}"; do
  link=$(cd "$build" && ninja -t commands "$t" | tail -1)
  [[ "$link" == *" -o $t "* ]] || { echo "variant_binaries.sh: no link command for $t" >&2; exit 2; }
  link=${link/ -o $t / -o $out/$t ${objects[*]} }
  (cd "$build" && eval "$link") || { echo "variant_binaries.sh: linking $t failed" >&2; exit 1; }
done
echo "variant_binaries.sh: ${targets[*]} in $out"
