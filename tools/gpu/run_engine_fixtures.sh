#!/usr/bin/env bash
# Run THERE (the GPU machine) after a build in $BUILD (default build-gpu): every HF fixture
# through `quiver generate`, compared with HF by tools/compare_fixtures.py:
#   cpu, once:                         --tol 1e-3 (float32 compute, the reference run)
#   cuda, eager and graph, each of:
#     float32 models:                  --tol 1e-3
#     16-bit models (bf16, f16), default numerics (16-bit KV cache, 16-bit GEMM inputs):
#                                      --bound $BOUND (docs/numerics.md)
#     16-bit models, --kv-cache-dtype float32 --matmul-precision highest:
#                                      --tol 1e-3
#   and every cuda run's greedy tokens against the cpu run's, request by request (they may
#   part only where HF's top-2 margin is below 1e-2, or below $BOUND for default 16-bit runs).
# Outputs: $OUT/gen_<model>_<run>.jsonl (+ .err); one summary line per check on stdout.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/quiver_out}"
mkdir -p "$OUT"
build=${BUILD:-build-gpu}
tol=${TOL:-1e-3}
bound=${BOUND:-0.25}
status=0

# generate MODEL RUN [flags...]: writes $OUT/gen_MODEL_RUN.jsonl; non-zero on failure.
generate() {
  local m=$1 run=$2
  shift 2
  local fx=tests/fixtures/$m loras=()
  for a in "$fx"/adapters/*; do loras+=(--lora "$(basename "$a")=$a"); done
  "./$build/quiver" generate --model "$fx" "${loras[@]}" --max-lora-rank 64 --max-loras 8 "$@" \
    --input "$fx/requests.jsonl" --output "$OUT/gen_${m}_$run.jsonl" 2>"$OUT/gen_${m}_$run.err" \
    || { echo "$m $run: generate failed"; tail -5 "$OUT/gen_${m}_$run.err"; return 1; }
}

# compare MODEL RUN ARGS...: compare_fixtures.py on that run's output, labelled.
compare() {
  local m=$1 run=$2
  shift 2
  echo "-- $m $run: $*"
  python3 tools/compare_fixtures.py "tests/fixtures/$m" "$OUT/gen_${m}_$run.jsonl" "$@" || status=1
}

for m in llama_gqa llama3_bf16 qwen2_tied mistral; do
  storage=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['storage_dtype'])" \
            "tests/fixtures/$m/manifest.json")
  if generate "$m" cpu --device cpu; then compare "$m" cpu --tol "$tol"; else status=1; fi
  for mode in eager graph; do
    extra=()
    [ "$mode" = eager ] && extra+=(--enforce-eager)
    if [ "$storage" = float32 ]; then
      generate "$m" "cuda_$mode" --device cuda "${extra[@]}" || { status=1; continue; }
      compare "$m" "cuda_$mode" --tol "$tol"
      [ -f "$OUT/gen_${m}_cpu.jsonl" ] && compare "$m" "cuda_$mode" --against "$OUT/gen_${m}_cpu.jsonl" --margin 1e-2
    else
      if generate "$m" "cuda_$mode" --device cuda "${extra[@]}"; then
        compare "$m" "cuda_$mode" --bound "$bound"
        [ -f "$OUT/gen_${m}_cpu.jsonl" ] && compare "$m" "cuda_$mode" --against "$OUT/gen_${m}_cpu.jsonl" --margin "$bound"
      else
        status=1
      fi
      if generate "$m" "cuda_${mode}_precise" --device cuda "${extra[@]}" \
           --kv-cache-dtype float32 --matmul-precision highest; then
        compare "$m" "cuda_${mode}_precise" --tol "$tol"
        [ -f "$OUT/gen_${m}_cpu.jsonl" ] &&
          compare "$m" "cuda_${mode}_precise" --against "$OUT/gen_${m}_cpu.jsonl" --margin 1e-2
      else
        status=1
      fi
    fi
  done
done
echo "run_engine_fixtures: $([ $status = 0 ] && echo ALL OK || echo FAILURES)"
exit $status
