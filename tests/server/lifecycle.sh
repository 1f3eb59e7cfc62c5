#!/usr/bin/env bash
# Start-up and shutdown of `quiver serve` over loopback (CTest: server_lifecycle).
#
#   tests/server/lifecycle.sh QUIVER_BINARY [SIGTERM_TRIES]   (default 50)
#
# 1. a second server on a port already in use fails with a message; the first keeps serving;
# 2. before any request, /metrics already reports the KV pool; /ping answers GET and POST;
# 3. SIGTERM at a random moment of start-up, SIGTERM_TRIES times: every time the process
#    exits within the shutdown timeout (plus the time the signal may wait for the model load).
set -uo pipefail

QUIVER=$(realpath "${1:?usage: lifecycle.sh QUIVER_BINARY [SIGTERM_TRIES]}")
TRIES=${2:-50}
HERE=$(cd "$(dirname "$0")" && pwd)
FIXTURE=$(cd "$HERE/../fixtures/llama_gqa" && pwd)
command -v node >/dev/null || { echo "SKIP: node is not installed"; exit 77; }
source "$HERE/harness.sh"
now_ms() { date +%s%3N; }

# wait_exit PID LIMIT_MS: waits for PID (a child of this shell) to exit; sets rc to its
# status, or to "hung" after LIMIT_MS.
wait_exit() {
  local pid=$1 deadline=$(($(now_ms) + $2))
  while kill -0 "$pid" 2>/dev/null && [ -z "$(ps -o stat= -p "$pid" | grep Z)" ]; do
    if [ "$(now_ms)" -ge "$deadline" ]; then rc=hung; return; fi
    sleep 0.01
  done
  wait "$pid"
  rc=$?
}

# wait_health URL: 0 once /health answers 200 (20 s at most).
wait_health() {
  for _ in $(seq 400); do
    curl -sf "$1/health" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  return 1
}

# ---- 1. a port already in use ---------------------------------------------------------------
PORT=$(free_port)
"$QUIVER" serve --model "$FIXTURE" --port "$PORT" >"$WORK/first.log" 2>&1 &
FIRST=$!
PIDS+=("$FIRST")
START=$(now_ms)
wait_health "http://127.0.0.1:$PORT" || { echo "first server did not start:"; cat "$WORK/first.log"; exit 1; }
STARTUP_MS=$(($(now_ms) - START))
"$QUIVER" serve --model "$FIXTURE" --port "$PORT" >"$WORK/second.log" 2>&1 &
SECOND=$!
PIDS+=("$SECOND")
wait_exit "$SECOND" 20000
if [ "$rc" != hung ] && [ "$rc" != 0 ] && grep -q "cannot bind 127.0.0.1:$PORT" "$WORK/second.log"; then
  pass "a second server on port $PORT fails (status $rc): $(tail -n 1 "$WORK/second.log")"
else
  fail "second server on a used port: status $rc: $(cat "$WORK/second.log")"
fi
# If both had bound, some of these would reach the second one (which is gone or never listened).
ok=0
for _ in $(seq 20); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && ok=$((ok + 1)); done
[ $ok = 20 ] && pass "the first server answers every request" || fail "the first server answered $ok of 20"

# ---- 2. state before any request, /ping ------------------------------------------------------
curl -s "http://127.0.0.1:$PORT/metrics" >"$WORK/metrics.txt"
total=$(awk '/^quiver:kv_cache_total_blocks\{/ {print $2}' "$WORK/metrics.txt")
info=$(grep -o 'num_gpu_blocks="[0-9]*"' "$WORK/metrics.txt" | grep -o '[0-9]*')
if [ -n "$total" ] && [ "$total" -gt 0 ] && [ "$info" = "$total" ]; then
  pass "KV totals before the first request: $total blocks"
else
  fail "KV totals before the first request: total '$total', cache_config_info '$info'"
fi
for method in GET POST; do
  data=()
  [ "$method" = POST ] && data=(-d '')
  code=$(curl -s -o /dev/null -w '%{http_code}' -X "$method" "${data[@]}" "http://127.0.0.1:$PORT/ping")
  [ "$code" = 200 ] && pass "$method /ping (200)" || fail "$method /ping: HTTP $code"
done
# One request: one log line naming it, its model and its token counts.
curl -s "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt": [1, 2, 3], "max_tokens": 2, "request_id": "life-1"}' >/dev/null
for _ in $(seq 50); do grep -q 'request cmpl-life-1 ' "$WORK/first.log" && break; sleep 0.02; done
if grep -Eq 'request cmpl-life-1 model=\S+ prompt_tokens=3 output_tokens=2 ttft=[0-9.]+m?s total=[0-9.]+m?s finish=length' \
    "$WORK/first.log"; then pass "request log line: $(grep -o 'request cmpl-life-1.*' "$WORK/first.log")"
else fail "no request log line: $(tail -n 3 "$WORK/first.log")"; fi
kill -TERM "$FIRST"
wait_exit "$FIRST" 10000
[ "$rc" = 0 ] && pass "SIGTERM once serving: exit 0" || fail "SIGTERM once serving: $rc: $(tail -n 3 "$WORK/first.log")"

# ---- 3. SIGTERM at random moments of start-up --------------------------------------------------
# Moments spread over [0, 1.5 x the measured time to healthy]; the limit allows the model load
# the signal may have to wait for, plus --shutdown-timeout.
SHUTDOWN_S=2
LIMIT_MS=$((STARTUP_MS * 2 + SHUTDOWN_S * 1000 + 2000))
hangs=0 statuses=""
for i in $(seq "$TRIES"); do
  port=$(free_port)
  delay_ms=$((RANDOM % (STARTUP_MS * 3 / 2 + 1)))
  "$QUIVER" serve --model "$FIXTURE" --port "$port" --shutdown-timeout "$SHUTDOWN_S" >"$WORK/term.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  kill -TERM "$pid" 2>/dev/null
  wait_exit "$pid" "$LIMIT_MS"
  statuses+="$rc "
  if [ "$rc" = hung ]; then
    hangs=$((hangs + 1))
    echo "  try $i: SIGTERM after ${delay_ms} ms: still running after ${LIMIT_MS} ms; log:"
    sed 's/^/    /' "$WORK/term.log"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  elif [ "$rc" != 0 ] && [ "$rc" != 143 ]; then
    # 143: the signal came before the process blocked it (its default action, also an exit).
    hangs=$((hangs + 1))
    echo "  try $i: SIGTERM after ${delay_ms} ms: exit status $rc; log:"
    sed 's/^/    /' "$WORK/term.log"
  fi
done
if [ $hangs = 0 ]; then pass "SIGTERM at $TRIES random moments of start-up (0-$((STARTUP_MS * 3 / 2)) ms): every exit in time"
else fail "SIGTERM during start-up: $hangs of $TRIES tries hung or failed (statuses: $statuses)"; fi

if [ $FAILED -ne 0 ]; then echo "lifecycle tests FAILED"; exit 1; fi
echo "lifecycle tests passed"
