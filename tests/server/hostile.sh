#!/usr/bin/env bash
# Hostile inputs against `quiver serve` over loopback (CTest: server_hostile): adapter files
# that used to kill the engine, a folder swapped behind an evicted adapter, and clients that
# break the rules. Needs only curl and python3; every server listens on 127.0.0.1 only.
#
#   tests/server/hostile.sh QUIVER_BINARY [LOAD_SECONDS]   (default 10; 0 skips the load part, which needs node)
set -uo pipefail

QUIVER=$(realpath "${1:?usage: hostile.sh QUIVER_BINARY}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FIXTURE=$ROOT/tests/fixtures/llama_gqa
KEY=hostile-key-$$
command -v curl >/dev/null && command -v python3 >/dev/null || { echo "SKIP: needs curl and python3"; exit 77; }

source "$(dirname "$0")/harness.sh"


# start_server LOG ARGS...: `quiver serve ARGS` on a free port; sets URL and PID.
start_server() {
  local log=$1 port
  shift
  port=$(free_port)
  "$QUIVER" serve --host 127.0.0.1 --port "$port" "$@" >"$log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  URL=http://127.0.0.1:$port
  for _ in $(seq 300); do
    curl -sf "$URL/health" >/dev/null 2>&1 && return 0
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "server failed to start:"; cat "$log"; exit 1
}

# expect STATUS WHAT CURL_ARGS...
expect() {
  local want=$1 what=$2 got
  shift 2
  got=$(curl -s -m 20 -o "$WORK/body" -w '%{http_code}' "$@")
  if [ "$got" = "$want" ]; then pass "$what ($got)"; else fail "$what: HTTP $got, expected $want: $(head -c 300 "$WORK/body")"; fi
}
AUTH=(-H "Authorization: Bearer $KEY")
load() {  # load NAME DIR
  curl -s -m 30 -o "$WORK/body" -w '%{http_code}' "${AUTH[@]}" "$URL/v1/load_lora_adapter" \
    -d "{\"lora_name\": \"$1\", \"lora_path\": \"$2\"}"
}
complete() {  # complete MODEL: HTTP status of a short greedy completion
  curl -s -m 30 -o "$WORK/body" -w '%{http_code}' "${AUTH[@]}" "$URL/v1/completions" \
    -d "{\"model\": \"$1\", \"prompt\": [5, 6, 7], \"max_tokens\": 4, \"temperature\": 0}"
}

# Adapters: good copies, and one whose tensor names a layer past 2^64.
A=$WORK/allowed
mkdir -p "$A" "$WORK/outside"
for n in one two three; do cp -r "$FIXTURE/adapters/r8_all" "$A/$n"; done
cp -r "$FIXTURE/adapters/r4_patterns" "$WORK/outside/secret"
python3 - "$FIXTURE/adapters/r1_qv/adapter_model.safetensors" "$WORK/bad_model.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
name = next(k for k in header if k != "__metadata__")
header[name.replace(".layers.0.", ".layers.99999999999999999999.").replace(".layers.1.", ".layers.99999999999999999999.")] = header.pop(name)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
PY
mkdir -p "$A/bad"
cp "$FIXTURE/adapters/r1_qv/adapter_config.json" "$A/bad/"
cp "$WORK/bad_model.safetensors" "$A/bad/adapter_model.safetensors"

start_server "$WORK/s.log" --model "$FIXTURE" --served-model-name base --max-lora-rank 64 --max-loras 1 --max-cpu-loras 1 \
  --api-key "$KEY" --allow-runtime-lora-updating --lora-path-allowlist "$A" --max-body-bytes 65536
S_PID=$PID

# ---- adapter operations never take the engine down ----------------------------------------
code=$(load bad "$A/bad")
if [ "$code" = 400 ] && grep -q "out of range" "$WORK/body"; then pass "load: huge layer index is a 400"
else fail "load bad: HTTP $code: $(head -c 300 "$WORK/body")"; fi
expect 200 "health after the bad load" "$URL/health"
[ "$(load one "$A/one")" = 200 ] && pass "load one" || fail "load one: $(cat "$WORK/body")"
[ "$(complete one)" = 200 ] && pass "completion on one" || fail "completion on one: $(cat "$WORK/body")"
# --max-cpu-loras 1: loading two evicts one from host memory; then one's folder goes bad.
[ "$(load two "$A/two")" = 200 ] && pass "load two (evicts one)" || fail "load two: $(cat "$WORK/body")"
cp "$WORK/bad_model.safetensors" "$A/one/adapter_model.safetensors"
code=$(complete one)
if [ "$code" = 400 ]; then pass "a bad file swapped in after eviction is that request's 400"
else fail "swapped bad file: HTTP $code (expected 400, no hang): $(head -c 300 "$WORK/body")"; fi
# three is evicted by reloading two's sibling; its folder becomes a link outside the list.
[ "$(load three "$A/three")" = 200 ] && pass "load three" || fail "load three: $(cat "$WORK/body")"
[ "$(complete two)" = 200 ] && pass "completion on two (evicts three)" || fail "completion on two: $(cat "$WORK/body")"
rm -rf "$A/three"
ln -s "$WORK/outside/secret" "$A/three"
code=$(complete three)
if [ "$code" = 400 ] && grep -q "outside the allowed folders" "$WORK/body"; then
  pass "reload through a link outside the allow-list is refused"
else fail "reload via link: HTTP $code: $(head -c 300 "$WORK/body")"; fi
mkdir -p "$A/leak"
ln -s "$WORK/outside/secret/adapter_config.json" "$A/leak/adapter_config.json"
cp "$FIXTURE/adapters/r1_qv/adapter_model.safetensors" "$A/leak/"
code=$(load leak "$A/leak")
if [ "$code" = 400 ] && ! grep -q "peft_type\|LORA" "$WORK/body"; then pass "a config linked outside is refused without its contents"
else fail "leak: HTTP $code: $(head -c 300 "$WORK/body")"; fi
expect 200 "health after every adapter attack" "$URL/health"
[ "$(complete "")" = 200 ] && pass "base model still serves" || fail "base completion: $(cat "$WORK/body")"

# ---- clients that break the rules ----------------------------------------------------------
head -c 200000 /dev/zero | tr '\0' ' ' >"$WORK/big.json"
expect 413 "chunked body over --max-body-bytes" "${AUTH[@]}" -H 'Transfer-Encoding: chunked' \
  "$URL/v1/completions" --data-binary @"$WORK/big.json"
expect 401 "/tokenize needs the API key" "$URL/tokenize" -d '{"prompt": [1]}'
expect 401 "/detokenize needs the API key" "$URL/detokenize" -d '{"tokens": [1]}'
expect 200 "/metrics stays open" "$URL/metrics"
curl -s "${AUTH[@]}" "$URL/v1/models" >"$WORK/models.json"
if grep -q "$FIXTURE\|$A" "$WORK/models.json"; then fail "/v1/models shows folders: $(head -c 300 "$WORK/models.json")"
else pass "/v1/models shows no folders without --show-model-paths"; fi
# ---- slow, idle, half-closed and pipelining clients (few workers, short deadlines) ----------
start_server "$WORK/slow.log" --model "$FIXTURE" --served-model-name base --api-key "$KEY" \
  --http-threads 4 --http-header-timeout 3 --http-max-connections 300
if python3 "$ROOT/tests/server/slow_clients.py" "${URL##*:}" "$KEY" 3 300; then pass "connection handling"
else fail "connection handling (lines above)"; fi
kill "$PID" 2>/dev/null

# ---- load while adapters come and go ------------------------------------------------------
# 64 streaming clients (15% disconnect early) for LOAD_SECONDS while one client loads,
# uses and unloads an adapter and attempts the malformed one, over and over; with
# --max-cpu-loras below the adapters in use, host-cache evictions and reloads never stop.
LOAD_SECONDS=${2:-10}
if command -v node >/dev/null && [ "$LOAD_SECONDS" != 0 ]; then
  cp -r "$FIXTURE/adapters/r8_all" "$A/dyn"
  LORAS=()
  for dir in "$FIXTURE"/adapters/*/; do LORAS+=(--lora-modules "$(basename "$dir")=${dir%/}"); done
  start_server "$WORK/load.log" --model "$FIXTURE" --max-lora-rank 64 --max-loras 4 --max-cpu-loras 4 "${LORAS[@]}" \
    --allow-runtime-lora-updating --lora-path-allowlist "$A" --show-model-paths
  ops() {
    local end=$((SECONDS + LOAD_SECONDS)) unexpected=0 rounds=0 c
    op() { curl -s -m 60 -o /dev/null -w '%{http_code}' "$URL/$1" -d "$2"; }
    while [ $SECONDS -lt $end ]; do
      [ "$(op v1/load_lora_adapter "{\"lora_name\": \"dyn\", \"lora_path\": \"$A/dyn\"}")" = 200 ] || unexpected=$((unexpected + 1))
      [ "$(op v1/completions '{"model": "dyn", "prompt": [5, 6, 7], "max_tokens": 4}')" = 200 ] || unexpected=$((unexpected + 1))
      [ "$(op v1/load_lora_adapter "{\"lora_name\": \"bad\", \"lora_path\": \"$A/bad\"}")" = 400 ] || unexpected=$((unexpected + 1))
      [ "$(op v1/unload_lora_adapter '{"lora_name": "dyn"}')" = 200 ] || unexpected=$((unexpected + 1))
      rounds=$((rounds + 1))
    done
    echo "$rounds $unexpected"
  }
  ops >"$WORK/ops.txt" &
  OPS_PID=$!
  if node "$ROOT/tools/load_test_server.js" --url "$URL" --duration "$LOAD_SECONDS" --clients 64 \
      --quiver "$QUIVER" --max-lora-rank 64; then pass "load test while adapters load, evict, reload and fail"
  else fail "load test while adapters change"; fi
  wait $OPS_PID
  read -r rounds unexpected <"$WORK/ops.txt"
  if [ "$unexpected" = 0 ] && [ "$rounds" -gt 0 ]; then pass "adapter operations under load: $rounds rounds, all answered as expected"
  else fail "adapter operations under load: $unexpected unexpected answers in $rounds rounds"; fi
  expect 200 "health after the load" "$URL/health"
else
  echo "note: node not found or LOAD_SECONDS=0; the load part is skipped"
fi

kill -0 "$S_PID" 2>/dev/null && pass "server survived" || fail "server died: $(tail "$WORK/s.log")"
if [ $FAILED -ne 0 ]; then echo "hostile server tests FAILED"; exit 1; fi
echo "hostile server tests passed"
