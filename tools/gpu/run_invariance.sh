#!/usr/bin/env bash
# Run THERE (one H200): the CUDA invariance suite, which every change to CUDA code passes on
# the GPU before it lands. One device call of about 6-8 minutes:
#   1. the GPU test binaries (every tests/gpu/*.cc, ops against the reference backend,
#      graphs against eager, and test_cuda_stress: 512 random requests under random
#      schedules against each request alone on CUDA and against the CPU);
#   2. tools/invariance.py --device cuda: every HF fixture under every schedule (chunks of
#      1/3/8/16/64, max-num-seqs 1 and 2, preemption, block sizes 1/4/16, prefix caching
#      off, max-loras 1, n = 2), graphs and eager, against HF and the CPU, and long prompts
#      (64-600 tokens), against their HF references too;
#   3. tools/server_invariance.py --device cuda: concurrent streams of chunked long prompts
#      against each request alone (when the server builds there: cpp-httplib from .deps/).
# From the dev machine: tools/gpu/fetch_deps.sh once, then the device tool with
# carry [".deps"] and `bash tools/gpu/run_invariance.sh`. Logs come back in $OUT/logs.tgz;
# the summary (one line per check, then "invariance suite: ALL OK" or "FAILURES") on stdout.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/quiver_out}"
FINAL_OUT=$OUT
LOGS=/tmp/invariance_logs
rm -rf "$LOGS" && mkdir -p "$LOGS" "$FINAL_OUT"
trap 'tar czf "$FINAL_OUT/logs.tgz" -C "$LOGS" . 2>/dev/null' EXIT
[ -d .deps/debs ] && source tools/gpu/setup_deps.sh
build=build-gpu
status=0
t0=$SECONDS

targets=()
for t in tests/gpu/*.cc; do targets+=("$(basename "$t" .cc)"); done
server=ON
if ! SERVER=ON bash tools/gpu/build_tree.sh . "$LOGS/build.log" "${targets[@]}"; then
  server=OFF  # no cpp-httplib there: everything but the server check
  SERVER=OFF bash tools/gpu/build_tree.sh . "$LOGS/build.log" "${targets[@]}" ||
    { grep -m5 -B2 -A5 error "$LOGS/build.log" || tail -20 "$LOGS/build.log"; exit 1; }
fi
echo "build $((SECONDS - t0))s (server $server)"

for t in "${targets[@]}"; do
  timeout 300 "./$build/$t" >"$LOGS/$t.log" 2>&1
  rc=$?
  [ $rc = 0 ] || status=1
  echo "$t rc=$rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$LOGS/$t.log" | tr '\n' ' ') $(grep -m1 '^stress ' "$LOGS/$t.log")"
  [ $rc = 0 ] || grep -E "Failure|Expected|Which is|smallest failing" "$LOGS/$t.log" | head -20
done

timeout 480 python3 tools/invariance.py --quiver "./$build/quiver" --device cuda --keep "$LOGS/invariance" \
  >"$LOGS/invariance.log" 2>&1
rc=$?
[ $rc = 0 ] || status=1
grep -vE ": ok( |$)" "$LOGS/invariance.log" | head -60
echo "invariance.py rc=$rc"

if [ "$server" = ON ]; then
  timeout 300 python3 tools/server_invariance.py --quiver "./$build/quiver" --device cuda >"$LOGS/server.log" 2>&1
  rc=$?
  [ $rc = 0 ] || status=1
  tail -12 "$LOGS/server.log"
  echo "server_invariance.py rc=$rc"
else
  echo "server_invariance.py: not run (the server did not build: see build.log)"
  status=1
fi
echo "total $((SECONDS - t0))s"
echo "invariance suite: $([ $status = 0 ] && echo ALL OK || echo FAILURES)"
exit $status
