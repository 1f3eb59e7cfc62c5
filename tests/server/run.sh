#!/usr/bin/env bash
# End-to-end tests of `quiver serve` over loopback (CTest: server_openai).
#
#   tests/server/run.sh QUIVER_BINARY [LOAD_TEST_SECONDS]   (default 10; 0 skips the load test)
#
# 1. the official OpenAI client (node:test, openai_client.test.mjs) against the llama_gqa
#    fixture with its 8 adapters and an API key;
#    then /tokenize and /detokenize on the demo model, and structured outputs and tool
#    calls on it (structured_client.test.mjs);
# 2. curl: malformed requests, body limit (413), runtime LoRA load/unload (allow-list,
#    `..` and symlink escapes, invalid adapters, unloading while a request runs);
# 3. SIGTERM with streams in flight: every stream ends with [DONE], exit status 0;
# 4. tools/load_test_server.js for LOAD_TEST_SECONDS, compared with `quiver generate`.
# Servers run on free ports and are always killed on exit. Exit 77 = skipped (no node/npm).
set -uo pipefail

QUIVER=$(realpath "${1:?usage: run.sh QUIVER_BINARY [LOAD_TEST_SECONDS]}")
LOAD_SECONDS=${2:-10}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
FIXTURE=$ROOT/tests/fixtures/llama_gqa
KEY=test-key-$$

command -v node >/dev/null || { echo "SKIP: node is not installed"; exit 77; }
if [ ! -d "$HERE/node_modules/openai" ]; then
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error) || { echo "SKIP: npm ci failed (offline?)"; exit 77; }
fi

source "$HERE/harness.sh"

ADAPTER_FLAGS=()
for dir in "$FIXTURE"/adapters/*/; do
  name=$(basename "$dir")
  ADAPTER_FLAGS+=(--lora-modules "$name=$FIXTURE/adapters/$name")
done

# start_server VAR LOG ARGS...: starts `quiver serve ARGS` on a free port; sets VAR_URL and
# VAR_PID once /health answers 200 (30 s at most).
start_server() {
  local var=$1 log=$2
  shift 2
  local port
  port=$(free_port)
  "$QUIVER" serve --port "$port" "$@" >"$log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  for _ in $(seq 300); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
      printf -v "${var}_URL" '%s' "http://127.0.0.1:$port"
      printf -v "${var}_PID" '%s' "$pid"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "server failed to start:"; cat "$log"
  exit 1
}

# expect STATUS DESCRIPTION CURL_ARGS...: the request answers STATUS (and an error body
# has the API's error shape).
expect() {
  local want=$1 what=$2
  shift 2
  local got
  got=$(curl -s -o "$WORK/body" -w '%{http_code}' "$@")
  if [ "$got" != "$want" ]; then
    fail "$what: HTTP $got, expected $want: $(head -c 300 "$WORK/body")"
  elif [ "$want" -ge 400 ] && ! node -e 'const e = JSON.parse(require("fs").readFileSync(process.argv[1])).error;
      if (typeof e.message !== "string" || typeof e.type !== "string" || e.code !== Number(process.argv[2]) || !("param" in e)) process.exit(1);' \
      "$WORK/body" "$want"; then
    fail "$what: HTTP $got but the body is not {\"error\": {message, type, param, code}}: $(head -c 300 "$WORK/body")"
  else
    pass "$what ($got)"
  fi
}

# ---- 1. the OpenAI client -----------------------------------------------------------------
mkdir -p "$WORK/allowed" "$WORK/outside"
start_server A "$WORK/a.log" --model "$FIXTURE" --max-lora-rank 64 --max-loras 4 "${ADAPTER_FLAGS[@]}" \
  --api-key "$KEY" --allow-runtime-lora-updating --lora-path-allowlist "$WORK/allowed" --max-body-bytes 1048576 --show-model-paths \
  --allowed-origins '["https://app.example"]'

CHAT_ENV=()
# The demo model (tokenizer + chat template): models/demo/base with models/demo/adapters/*.
DEMO=$ROOT/models/demo
if [ -f "$DEMO/base/tokenizer.json" ] && [ -f "$DEMO/base/config.json" ]; then
  DEMO_FLAGS=()
  for dir in "$DEMO"/adapters/*/; do
    [ -f "$dir/adapter_config.json" ] && DEMO_FLAGS+=(--lora-modules "$(basename "$dir")=${dir%/}")
  done
  # The model folder as vllm serve's positional argument.
  start_server D "$WORK/d.log" "$DEMO/base" --api-key "$KEY" --max-loras 2 --max-lora-rank 64 "${DEMO_FLAGS[@]}"
  CHAT_ENV=(QUIVER_CHAT_URL="$D_URL")
  [ -d "$DEMO/adapters/sql" ] && CHAT_ENV+=(QUIVER_CHAT_ADAPTER=sql)
else
  echo "note: $DEMO/base not found; chat tests are skipped"
fi

if env QUIVER_URL="$A_URL" QUIVER_API_KEY="$KEY" QUIVER_FIXTURE="$FIXTURE" "${CHAT_ENV[@]}" \
    node --test --test-reporter=spec "$HERE/openai_client.test.mjs"; then
  pass "OpenAI client tests"
else
  fail "OpenAI client tests"
fi

# ---- 1b. /tokenize and /detokenize (vLLM's extra routes), on the demo model ------------------
if [ -n "${D_URL:-}" ]; then
  # node_field URL BODY EXPR: POSTs BODY to URL and prints EXPR of the JSON reply (r).
  node_field() {
    curl -s "$1" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' -d "$2" >"$WORK/tok.json"
    node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1])); console.log(JSON.stringify(eval(process.argv[2])));' \
      "$WORK/tok.json" "$3"
  }
  ids=$(node_field "$D_URL/tokenize" '{"prompt": "SELECT name FROM users", "add_special_tokens": false}' 'r.tokens')
  back=$(node_field "$D_URL/detokenize" "{\"model\": \"sql\", \"tokens\": $ids}" 'r.prompt')
  if [ "$back" = '"SELECT name FROM users"' ]; then pass "/tokenize then /detokenize gives the text back"
  else fail "/tokenize -> $ids -> /detokenize -> $back"; fi
  MSGS='"messages": [{"role": "user", "content": "list users"}]'
  count=$(node_field "$D_URL/tokenize" "{\"model\": \"sql\", $MSGS}" 'r.count')
  used=$(node_field "$D_URL/v1/chat/completions" "{\"model\": \"sql\", $MSGS, \"max_tokens\": 1}" 'r.usage.prompt_tokens')
  if [ -n "$count" ] && [ "$count" = "$used" ]; then pass "/tokenize of chat messages counts what chat completions use ($count)"
  else fail "/tokenize messages count '$count' vs chat usage.prompt_tokens '$used'"; fi
  # continue_final_message: the sql adapter finishes an answer the request began, and
  # /tokenize counts the same prompt.
  SQL_Q='Write a SQL query to answer the question based on the table schema.\n\n context: CREATE TABLE'
  SQL_Q+=' table_name_74 (icao VARCHAR, airport VARCHAR)\n\n question: Name the ICAO for lilongwe airport'
  CONT='"messages": [{"role": "user", "content": "'"$SQL_Q"'"}, {"role": "assistant", "content": " SELECT icao"}],
    "continue_final_message": true, "add_generation_prompt": false'
  text=$(node_field "$D_URL/v1/chat/completions" "{\"model\": \"sql\", $CONT, \"max_tokens\": 12, \"temperature\": 0}" \
    'r.choices[0].message.content')
  count=$(node_field "$D_URL/tokenize" "{\"model\": \"sql\", $CONT}" 'r.count')
  used=$(node_field "$D_URL/v1/chat/completions" "{\"model\": \"sql\", $CONT, \"max_tokens\": 1}" 'r.usage.prompt_tokens')
  case "$text" in
    '" FROM'*) if [ "$count" = "$used" ]; then pass "continue_final_message: the answer goes on from the given start ($text)"
               else fail "continue_final_message: /tokenize count '$count' vs usage '$used'"; fi ;;
    *) fail "continue_final_message: the continuation is $text" ;;
  esac
  # use_beam_search: n beams, best first, whole or streamed; the sql adapter's best begins its
  # greedy answer.
  BEAM="{\"model\": \"sql\", \"messages\": [{\"role\": \"user\", \"content\": \"$SQL_Q\"}], \"use_beam_search\": true,
    \"n\": 3, \"max_tokens\": 8, \"length_penalty\": 1.0"
  got=$(node_field "$D_URL/v1/chat/completions" "$BEAM}" '[r.choices.length, r.choices[0].message.content]')
  curl -s -N "$D_URL/v1/chat/completions" -H "Authorization: Bearer $KEY" -d "$BEAM, \"stream\": true}" >"$WORK/beam.txt"
  streamed=$(node -e 'let t = ""; for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n"))
      if (l.startsWith("data: {")) for (const c of JSON.parse(l.slice(6)).choices) if (c.index === 0) t += c.delta.content || "";
      console.log(JSON.stringify(t));' "$WORK/beam.txt")
  case "$got" in
    '[3," SELECT icao FROM'*) if [ "[3,$streamed]" = "$got" ]; then pass "use_beam_search: 3 beams, the best $got"
                               else fail "use_beam_search: streamed $streamed, whole $got"; fi ;;
    *) fail "use_beam_search: $got" ;;
  esac
  # echo with continue_final_message: the whole assistant message, begun and continued,
  # whole and streamed; its role is the last message's.
  ECHO="{\"model\": \"sql\", $CONT, \"max_tokens\": 12, \"temperature\": 0, \"echo\": true"
  got=$(node_field "$D_URL/v1/chat/completions" "$ECHO}" '[r.choices[0].message.role, r.choices[0].message.content]')
  curl -s -N "$D_URL/v1/chat/completions" -H "Authorization: Bearer $KEY" -d "$ECHO, \"stream\": true}" >"$WORK/echo.txt"
  streamed=$(node -e 'let t = ""; for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n"))
      if (l.startsWith("data: {")) for (const c of JSON.parse(l.slice(6)).choices) t += c.delta.content || "";
      console.log(JSON.stringify(t));' "$WORK/echo.txt")
  want=$(node -e 'console.log(JSON.stringify(["assistant", " SELECT icao" + JSON.parse(process.argv[1])]))' "$text")
  if [ "$got" = "$want" ] && [ "[\"assistant\",$streamed]" = "$got" ]; then
    pass "chat echo: the begun message and its continuation ($got)"
  else fail "chat echo: $got, streamed $streamed, continuation $text"; fi
  expect 400 "use_beam_search with stop" -H "Authorization: Bearer $KEY" "$D_URL/v1/chat/completions" -d "$BEAM, \"stop\": \"x\"}"
  expect 400 "a request's chat_template without --trust-request-chat-template" -H "Authorization: Bearer $KEY" \
    "$D_URL/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "x"}], "chat_template": "{{ 1 }}"}'
  expect 404 "/tokenize with an unknown model" -H "Authorization: Bearer $KEY" "$D_URL/tokenize" -d '{"model": "nope", "prompt": "x"}'
  expect 400 "/detokenize with an id outside the vocabulary" -H "Authorization: Bearer $KEY" "$D_URL/detokenize" -d '{"tokens": [1, 99999999]}'
  expect 401 "/tokenize without the API key" "$D_URL/tokenize" -d '{"prompt": "x"}'
fi

# ---- 1c. structured outputs and tool calls (structured_client.test.mjs), on the demo model ----
if [ -f "$DEMO/base/tokenizer.json" ]; then
  start_server S "$WORK/s.log" --model "$DEMO/base" --enable-auto-tool-choice --tool-call-parser hermes
  if env QUIVER_STRUCT_URL="$S_URL" node --test --test-reporter=spec "$HERE/structured_client.test.mjs"; then
    pass "structured output and tool call tests"
  else
    fail "structured output and tool call tests"
  fi
  # vLLM's --enable-log-requests asks for quiver's default; with --disable-log-requests it is refused.
  if ! "$QUIVER" serve --model "$DEMO/base" --enable-log-requests --disable-log-requests >"$WORK/logflags.log" 2>&1 &&
     grep -q 'excludes' "$WORK/logflags.log"; then pass "--enable-log-requests with --disable-log-requests refused"
  else fail "--enable-log-requests with --disable-log-requests: $(head -2 "$WORK/logflags.log")"; fi
  # The mistral parser needs Mistral v0.3's [TOOL_CALLS] token, which the demo's vocabulary lacks.
  "$QUIVER" serve --port "$(free_port)" --model "$DEMO/base" --enable-auto-tool-choice --tool-call-parser mistral \
    >"$WORK/mistral.log" 2>&1
  rc=$?
  if [ "$rc" = 2 ] && grep -q 'no \[TOOL_CALLS\] token' "$WORK/mistral.log"; then
    pass "--tool-call-parser mistral refused without the [TOOL_CALLS] token"
  else fail "--tool-call-parser mistral without the token: exit $rc, $(tail -2 "$WORK/mistral.log")"; fi
fi

# ---- 1d. reasoning outputs (--reasoning-parser deepseek_r1), on the demo model --------------
# The demo never writes </think>, so under deepseek_r1 its whole answer is reasoning: content
# null, the same text in reasoning and reasoning_content, and streamed reasoning deltas that
# add up to it.
if [ -f "$DEMO/base/tokenizer.json" ]; then
  start_server R "$WORK/r.log" "$DEMO/base" --reasoning-parser deepseek_r1 --enable-force-include-usage \
    --return-tokens-as-token-ids --enable-prompt-tokens-details --scheduling-policy priority --response-role model \
    --served-model-name demo demo-alias --enable-request-id-headers --trust-request-chat-template --enable-log-requests
  # r_field ROUTE BODY EXPR: Python's EXPR of server R's JSON answer `r`.
  r_field() {
    curl -s "$R_URL$1" -d "$2" | /usr/bin/python3 -c "import json, sys; r = json.load(sys.stdin); print($3)"
  }
  BODY='{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 12, "temperature": 0'
  curl -s "$R_URL/v1/chat/completions" -d "$BODY}" >"$WORK/r_whole.json"
  curl -s -N "$R_URL/v1/chat/completions" -d "$BODY, \"stream\": true}" >"$WORK/r_stream.txt"
  if /usr/bin/python3 - "$WORK/r_whole.json" "$WORK/r_stream.txt" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["choices"][0]["message"]
assert m["content"] is None and m["reasoning"] and m["reasoning"] == m["reasoning_content"], m
streamed = ""
for line in open(sys.argv[2]):
    if line.startswith("data: {"):
        for c in json.loads(line[6:])["choices"]:
            d = c["delta"]
            assert not d.get("content"), d
            assert d.get("reasoning") == d.get("reasoning_content"), d
            streamed += d.get("reasoning") or ""
assert streamed == m["reasoning"], (streamed, m["reasoning"])
PY
  then pass "reasoning parser: whole and streamed answers as reasoning"
  else fail "reasoning parser: $(head -c 300 "$WORK/r_whole.json")"; fi
  got=$(r_field /v1/chat/completions "$BODY, \"include_reasoning\": false}" \
    'r["choices"][0]["message"]["reasoning"], r["choices"][0]["message"]["content"]')
  if [ "$got" = "None None" ]; then pass "reasoning parser: include_reasoning false leaves it out"
  else fail "reasoning parser: include_reasoning false gave $got"; fi
  # --trust-request-chat-template: the request's own template renders its prompt.
  own=$(r_field /tokenize \
    '{"messages": [{"role": "user", "content": "Hello"}], "chat_template": "<{{ messages[0].content }}>"}' 'r["tokens"]')
  want=$(r_field /tokenize '{"prompt": "<Hello>", "add_special_tokens": false}' 'r["tokens"]')
  if [ -n "$own" ] && [ "$own" = "$want" ]; then pass "--trust-request-chat-template: the request's template renders it"
  else fail "--trust-request-chat-template: $own against $want"; fi
  got=$(r_field /v1/chat/completions "$BODY}" 'r["choices"][0]["message"]["role"]')
  if [ "$got" = model ]; then pass "--response-role: the answer's role is model"
  else fail "--response-role: role $got"; fi
  # stream_options.continuous_usage_stats: every chunk carries the usage so far.
  curl -s -N "$R_URL/v1/chat/completions" \
    -d "$BODY, \"stream\": true, \"stream_options\": {\"continuous_usage_stats\": true}}" >"$WORK/r_usage.txt"
  if /usr/bin/python3 - "$WORK/r_usage.txt" "$WORK/r_whole.json" <<'PY'
import json, sys
chunks = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("data: {")]
used = [c["usage"]["completion_tokens"] for c in chunks]
total = json.load(open(sys.argv[2]))["usage"]["completion_tokens"]
assert all("usage" in c for c in chunks) and used == sorted(used) and used[-1] == total > 0, (used, total)
PY
  then pass "continuous_usage_stats: usage in every chunk"
  else fail "continuous_usage_stats: $(head -c 300 "$WORK/r_usage.txt")"; fi
  # --enable-force-include-usage: the stream without stream_options ends with usage;
  # --return-tokens-as-token-ids: logprob tokens are named by id.
  if grep -q '"choices":\[\],.*"usage"\|"usage".*"choices":\[\]' "$WORK/r_stream.txt"
  then pass "--enable-force-include-usage: a usage chunk without stream_options"
  else fail "--enable-force-include-usage: no usage chunk in $(tail -c 300 "$WORK/r_stream.txt")"; fi
  got=$(r_field /v1/completions '{"prompt": "Hello", "max_tokens": 2, "logprobs": 1}' \
    'r["choices"][0]["logprobs"]["tokens"][0][:9]')
  if [ "$got" = "token_id:" ]; then pass "--return-tokens-as-token-ids: logprob tokens by id"
  else fail "--return-tokens-as-token-ids: token $got"; fi
  # --enable-prompt-tokens-details: a prompt of several KV blocks finds nothing cached the
  # first time and its whole blocks the second.
  LONG='{"prompt": "'"$(printf 'the quick brown fox jumps over the lazy dog %.0s' $(seq 8))"'", "max_tokens": 2}'
  first=$(r_field /v1/completions "$LONG" 'r["usage"]["prompt_tokens_details"]["cached_tokens"]')
  got=$(r_field /v1/completions "$LONG" 'r["usage"]["prompt_tokens_details"]["cached_tokens"]')
  if [ "$first" = 0 ] && [ "$got" -gt 0 ] 2>/dev/null; then pass "--enable-prompt-tokens-details: cached_tokens $first, then $got"
  else fail "--enable-prompt-tokens-details: cached_tokens $first, then $got"; fi
  # cache_salt: the same prompt under a salt finds none of the unsalted blocks, then its own.
  SALTED="${LONG%\}}, \"cache_salt\": \"tenant-1\"}"
  first=$(r_field /v1/completions "$SALTED" 'r["usage"]["prompt_tokens_details"]["cached_tokens"]')
  got=$(r_field /v1/completions "$SALTED" 'r["usage"]["prompt_tokens_details"]["cached_tokens"]')
  if [ "$first" = 0 ] && [ "$got" -gt 0 ] 2>/dev/null; then pass "cache_salt: cached_tokens $first, then $got"
  else fail "cache_salt: cached_tokens $first, then $got"; fi
  # allowed_token_ids, truncate_prompt_tokens and priority (--scheduling-policy priority).
  got=$(r_field /v1/completions '{"prompt": "Hello", "max_tokens": 6, "temperature": 1, "seed": 4, "ignore_eos": true,
    "allowed_token_ids": [300, 301], "return_token_ids": true}' 'sorted(set(r["choices"][0]["token_ids"]) - {300, 301})')
  if [ "$got" = "[]" ]; then pass "allowed_token_ids: every token in the set"
  else fail "allowed_token_ids: tokens outside the set: $got"; fi
  got=$(r_field /v1/completions '{"prompt": "the quick brown fox jumps", "max_tokens": 2, "truncate_prompt_tokens": 3,
    "priority": -3, "bad_words": ["the"]}' 'r["usage"]["prompt_tokens"]')
  if [ "$got" = 3 ]; then pass "truncate_prompt_tokens: 3 prompt tokens, with priority and bad_words"
  else fail "truncate_prompt_tokens: prompt_tokens $got"; fi
  # X-Request-Id names the request (the response id, as vLLM), and with
  # --enable-request-id-headers comes back as a header, or a new one without it.
  headers=$(curl -s -D - -o "$WORK/rid.json" "$R_URL/v1/completions" -H 'X-Request-Id: trace-7' \
    -d '{"prompt": "Hello", "max_tokens": 1, "request_id": "body-id"}' | tr -d '\r')
  id=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["id"])' "$WORK/rid.json")
  fresh=$(curl -s -D - -o /dev/null "$R_URL/v1/models" | tr -d '\r' | grep -i '^x-request-id: .')
  if [ "$id" = cmpl-trace-7 ] && echo "$headers" | grep -qi '^x-request-id: trace-7$' && [ -n "$fresh" ]; then
    pass "X-Request-Id: the response id and header ($id), a new one otherwise"
  else fail "X-Request-Id: id $id, headers $(echo "$headers" | grep -i request-id), fresh '$fresh'"; fi
  # /invocations (SageMaker's route): a chat body or a completion body, by its fields.
  got=$(r_field /invocations '{"prompt": "Hello", "max_tokens": 2}' 'r["object"]')
  got="$got $(r_field /invocations '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}' 'r["object"]')"
  if [ "$got" = "text_completion chat.completion" ]; then pass "/invocations: a completion and a chat completion"
  else fail "/invocations: $got"; fi
  expect 400 "/invocations without prompt or messages" "$R_URL/invocations" -d '{"max_tokens": 2}'
  # --served-model-name with two names: either serves the base model, responses name the first.
  got=$(r_field /v1/completions '{"model": "demo-alias", "prompt": "Hello", "max_tokens": 1}' 'r["model"]')
  ids=$(curl -s "$R_URL/v1/models" | /usr/bin/python3 -c 'import json, sys; print(sorted(m["id"] for m in json.load(sys.stdin)["data"]))')
  if [ "$got" = demo ] && [ "$ids" = "['demo', 'demo-alias']" ]; then pass "--served-model-name: two names, $ids"
  else fail "--served-model-name: response model $got, models $ids"; fi
  expect 400 "truncate_prompt_tokens over max_model_len" "$R_URL/v1/completions" \
    -d '{"prompt": "Hello", "truncate_prompt_tokens": 100000000}'
fi

# ---- 2. curl: malformed requests and limits ----------------------------------------------
AUTH=(-H "Authorization: Bearer $KEY")
expect 400 "bad JSON" "${AUTH[@]}" "$A_URL/v1/completions" -d '{"prompt": [1, 2'
expect 400 "JSON that is not an object" "${AUTH[@]}" "$A_URL/v1/completions" -d '[1, 2, 3]'
expect 400 "deeply nested JSON" "${AUTH[@]}" "$A_URL/v1/completions" -d "$(printf '[%.0s' $(seq 5000))"
expect 400 "prompt of the wrong type" "${AUTH[@]}" "$A_URL/v1/completions" -d '{"prompt": {"a": 1}}'
expect 400 "mixed token list" "${AUTH[@]}" "$A_URL/v1/completions" -d '{"prompt": [1, "a"]}'
expect 400 "empty body" "${AUTH[@]}" "$A_URL/v1/completions" -d ''
expect 400 "POST without Content-Length (after the read timeout)" "${AUTH[@]}" -X POST "$A_URL/v1/completions"
expect 401 "no API key" "$A_URL/v1/completions" -d '{"prompt": [1]}'
expect 401 "wrong API key" -H "Authorization: Bearer nope" "$A_URL/v1/models"
expect 404 "unknown route" "${AUTH[@]}" "$A_URL/v1/nothing"
expect 400 "priority without --scheduling-policy priority" "${AUTH[@]}" "$A_URL/v1/completions" \
  -d '{"prompt": [1], "priority": 1}'
head -c 2000000 /dev/zero | tr '\0' ' ' >"$WORK/big.json"
expect 413 "body over --max-body-bytes (Expect: 100-continue)" "${AUTH[@]}" "$A_URL/v1/completions" \
  -H 'Content-Type: application/json' --data-binary @"$WORK/big.json"
expect 413 "body over --max-body-bytes (sent at once)" "${AUTH[@]}" -H 'Expect:' "$A_URL/v1/completions" \
  -H 'Content-Type: application/json' --data-binary @"$WORK/big.json"
expect 200 "server still healthy" "$A_URL/health"

# ---- 2a. CORS: a browser on the allowed origin may call, others may not -------------------
# cors_header WANT WHAT CURL_ARGS...: the Access-Control-Allow-Origin the response carries.
cors_header() {
  local want=$1 what=$2 got
  shift 2
  got=$(curl -s -D - -o /dev/null "$@" | tr -d '\r' | awk -F': ' 'tolower($1) == "access-control-allow-origin" {print $2}')
  if [ "$got" = "$want" ]; then pass "CORS: $what"; else fail "CORS: $what: Allow-Origin '$got', expected '$want'"; fi
}
PREFLIGHT=(-X OPTIONS -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: authorization, content-type')
cors_header "https://app.example" "preflight from the allowed origin, before the API key" \
  "${PREFLIGHT[@]}" -H 'Origin: https://app.example' "$A_URL/v1/completions"
code=$(curl -s -o /dev/null -w '%{http_code}' "${PREFLIGHT[@]}" -H 'Origin: https://evil.example' "$A_URL/v1/completions")
if [ "$code" = 400 ]; then pass "CORS: preflight from another origin refused (400)"
else fail "CORS: preflight from another origin: HTTP $code, expected 400"; fi
cors_header "https://app.example" "response to the allowed origin" "${AUTH[@]}" -H 'Origin: https://app.example' \
  "$A_URL/v1/models"
cors_header "https://app.example" "401 to the allowed origin is readable" -H 'Origin: https://app.example' \
  "$A_URL/v1/models"
cors_header "" "no header for another origin" "${AUTH[@]}" -H 'Origin: https://evil.example' "$A_URL/v1/models"

# ---- 2b. runtime LoRA adapters -----------------------------------------------------------
cp -r "$FIXTURE/adapters/r8_all" "$WORK/allowed/dyn"
cp -r "$FIXTURE/adapters/r4_patterns" "$WORK/outside/secret"
ln -s "$WORK/outside/secret" "$WORK/allowed/escape_link"
mkdir -p "$WORK/allowed/broken"
echo '{"r": "not an adapter"' >"$WORK/allowed/broken/adapter_config.json"
load() { curl -s -o "$WORK/body" -w '%{http_code}' "${AUTH[@]}" "$A_URL/v1/load_lora_adapter" -d "$1"; }

expect 400 "load: path outside the allow-list" "${AUTH[@]}" "$A_URL/v1/load_lora_adapter" \
  -d "{\"lora_name\": \"x\", \"lora_path\": \"$WORK/outside/secret\"}"
expect 400 "load: .. escape" "${AUTH[@]}" "$A_URL/v1/load_lora_adapter" \
  -d "{\"lora_name\": \"x\", \"lora_path\": \"$WORK/allowed/../outside/secret\"}"
expect 400 "load: symlink escape" "${AUTH[@]}" "$A_URL/v1/load_lora_adapter" \
  -d "{\"lora_name\": \"x\", \"lora_path\": \"$WORK/allowed/escape_link\"}"
expect 400 "load: invalid adapter" "${AUTH[@]}" "$A_URL/v1/load_lora_adapter" \
  -d "{\"lora_name\": \"broken\", \"lora_path\": \"$WORK/allowed/broken\"}"
expect 400 "load: missing lora_path" "${AUTH[@]}" "$A_URL/v1/load_lora_adapter" -d '{"lora_name": "x"}'
expect 200 "load: allowed adapter" "${AUTH[@]}" "$A_URL/v1/load_lora_adapter" \
  -d "{\"lora_name\": \"dyn\", \"lora_path\": \"$WORK/allowed/dyn\"}"
expect 400 "load: name already loaded" "${AUTH[@]}" "$A_URL/v1/load_lora_adapter" \
  -d "{\"lora_name\": \"dyn\", \"lora_path\": \"$WORK/allowed/dyn\"}"
curl -s "${AUTH[@]}" "$A_URL/v1/models" >"$WORK/models.json"
if node -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1])).data;
    if (d.some((m) => m.id === "broken" || m.id === "x") || !d.some((m) => m.id === "dyn" && m.parent === d[0].id)) process.exit(1);' \
    "$WORK/models.json"; then pass "models: dyn listed under the base model, rejected adapters absent"
else fail "models after loads: $(cat "$WORK/models.json")"; fi

# dyn is a copy of r8_all: same tokens.
completion() {
  curl -s "${AUTH[@]}" "$A_URL/v1/completions" \
    -d "{\"model\": \"$1\", \"prompt\": [61, 466, 51], \"max_tokens\": 8, \"temperature\": 0, \"ignore_eos\": true, \"return_token_ids\": true}" |
    node -e 'let s = ""; process.stdin.on("data", (d) => s += d).on("end", () => console.log(JSON.stringify(JSON.parse(s).choices[0].token_ids)));'
}
if [ "$(completion dyn)" = "$(completion r8_all)" ] && [ -n "$(completion dyn)" ]; then pass "runtime adapter dyn generates like r8_all"
else fail "dyn vs r8_all: $(completion dyn) vs $(completion r8_all)"; fi

# Unload while a request on the adapter is running: the request finishes normally. 64 x 250
# tokens (the fixture's context is 256): long enough that a loaded CI machine still unloads
# before it ends (16 x 120 once finished first).
curl -sN "${AUTH[@]}" "$A_URL/v1/completions" \
  -d '{"model": "dyn", "prompt": [5, 6, 7], "n": 64, "max_tokens": 250, "ignore_eos": true, "stream": true}' \
  >"$WORK/running.sse" &
STREAM_PID=$!
for _ in $(seq 100); do [ -s "$WORK/running.sse" ] && break; sleep 0.02; done
expect 200 "unload while a request runs" "${AUTH[@]}" "$A_URL/v1/unload_lora_adapter" -d '{"lora_name": "dyn"}'
kill -0 $STREAM_PID 2>/dev/null && pass "the request was still running at the unload" ||
  fail "the request finished before the unload (test too fast to check deferred unloading)"
expect 404 "requests for the unloaded adapter" "${AUTH[@]}" "$A_URL/v1/completions" -d '{"model": "dyn", "prompt": [1]}'
wait $STREAM_PID
if tail -n 3 "$WORK/running.sse" | grep -q '^data: \[DONE\]' && grep -q '"finish_reason":"length"' "$WORK/running.sse" &&
   ! grep -q '"finish_reason":"abort"' "$WORK/running.sse"; then pass "the running request finished after the unload"
else fail "running request after unload: $(tail -c 400 "$WORK/running.sse")"; fi
expect 404 "unload: unknown adapter" "${AUTH[@]}" "$A_URL/v1/unload_lora_adapter" -d '{"lora_name": "dyn"}'
expect 200 "load again after the unload" "${AUTH[@]}" "$A_URL/v1/load_lora_adapter" \
  -d "{\"lora_name\": \"dyn\", \"lora_path\": \"$WORK/allowed/dyn\"}"
expect 200 "unload a fixture adapter" "${AUTH[@]}" "$A_URL/v1/unload_lora_adapter" -d '{"lora_name": "r1_qv"}'

# ---- 3. SIGTERM with streams in flight ---------------------------------------------------
start_server T "$WORK/t.log" --model "$FIXTURE" --shutdown-timeout 0.5 --max-pending-requests 4
for i in 1 2 3 4; do
  curl -sN "$T_URL/v1/completions" \
    -d '{"prompt": [9, 8, 7], "n": 16, "max_tokens": 250, "ignore_eos": true, "stream": true}' >"$WORK/term$i.sse" &
  eval "TERM_CURL$i=\$!"
done
for i in 1 2 3 4; do
  for _ in $(seq 100); do [ -s "$WORK/term$i.sse" ] && break; sleep 0.02; done
done
expect 503 "overloaded (--max-pending-requests 4, 4 running)" "$T_URL/v1/completions" -d '{"prompt": [1]}'
kill -TERM "$T_PID"
sleep 0.1
expect 503 "shutting down: new requests refused while in-flight ones drain" "$T_URL/v1/completions" -d '{"prompt": [1]}'
wait "$T_PID"
rc=$?
if [ $rc -eq 0 ]; then pass "SIGTERM: exit status 0"; else fail "SIGTERM: exit status $rc: $(cat "$WORK/t.log")"; fi
for i in 1 2 3 4; do
  eval "wait \$TERM_CURL$i"
  if tail -n 2 "$WORK/term$i.sse" | grep -q '^data: \[DONE\]'; then pass "SIGTERM: stream $i ended with [DONE]"
  else fail "SIGTERM: stream $i: $(tail -c 300 "$WORK/term$i.sse")"; fi
done
grep -q 'shutting down' "$WORK/t.log" && pass "SIGTERM: logged" || fail "SIGTERM log: $(cat "$WORK/t.log")"

# ---- 4. load test ------------------------------------------------------------------------
if [ "$LOAD_SECONDS" != 0 ]; then
  # --show-model-paths: the load test finds the folders to run `quiver generate` on in /v1/models.
  start_server L "$WORK/l.log" --model "$FIXTURE" --max-lora-rank 64 --max-loras 8 "${ADAPTER_FLAGS[@]}" --show-model-paths
  expect 404 "runtime LoRA endpoints are off without --allow-runtime-lora-updating" "$L_URL/v1/load_lora_adapter" \
    -d "{\"lora_name\": \"dyn\", \"lora_path\": \"$WORK/allowed/dyn\"}"
  if node "$ROOT/tools/load_test_server.js" --url "$L_URL" --duration "$LOAD_SECONDS" --clients 64 \
      --quiver "$QUIVER" --max-lora-rank 64; then pass "load test"; else fail "load test"; fi
fi

kill -0 "$A_PID" 2>/dev/null && pass "server A survived everything" || fail "server A died: $(tail "$WORK/a.log")"
if [ $FAILED -ne 0 ]; then echo "server tests FAILED"; exit 1; fi
echo "server tests passed"
