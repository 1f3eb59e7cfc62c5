#!/usr/bin/env bash
# Run THERE (the GPU machine) after a build in build-gpu: every HF fixture through
# `quiver generate --device cuda` (eager and graphs, when available), compared with HF.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/quiver_out}"
build=${BUILD:-build-gpu}
status=0
for m in llama_gqa llama3_bf16 qwen2_tied mistral; do
  fx=tests/fixtures/$m
  loras=()
  for a in "$fx"/adapters/*; do loras+=(--lora "$(basename "$a")=$a"); done
  for mode in eager graph; do
    extra=()
    [ "$mode" = eager ] && extra+=(--enforce-eager)
    "./$build/quiver" generate --model "$fx" "${loras[@]}" --max-lora-rank 64 --max-loras 8 --device cuda \
      "${extra[@]}" --input "$fx/requests.jsonl" --output "$OUT/gen_${m}_$mode.jsonl" 2>"$OUT/gen_${m}_$mode.err" \
      || { echo "$m $mode: generate failed"; tail -5 "$OUT/gen_${m}_$mode.err"; status=1; continue; }
    python3 tools/compare_fixtures.py "$fx" "$OUT/gen_${m}_$mode.jsonl" --tol "${TOL:-1e-3}" || status=1
  done
done
exit $status
