#!/usr/bin/env bash
# Run THERE (one H200): the same GPU tests and 7B decode benches on several source trees, so
# one run on the GPU compares source trees (a kernel change, say) against main. Prepare here:
#   for b in main candidate; do
#     rm -rf build-trees/$b && mkdir -p build-trees/$b &&
#       git archive $b | tar -x -C build-trees/$b --exclude=models --exclude='tests/fixtures/*' &&
#       git archive $b tests/fixtures/llama3_bf16 | tar -x -C build-trees/$b
#   done
#   for b in main candidate; do echo "$b $(git rev-parse --short $b)"; done >build-trees/commits
# (the GPU tests need only that fixture; at most 64 MiB of files are copied to the GPU
# machine, so leave out tests/tokenizer_data too). The checkout itself can be one of the trees:
# `ln -sfn .. build-trees/NAME` there (a link is not copied); it is built in ./build-gpu,
# which run_checks.sh then reuses (FIX, VERIFY) instead of building again.
# Then, on the GPU machine with .deps and build-trees copied over, run
#   TREES="main candidate" bash tools/gpu/compare_trees.sh
# Variables: TARGETS (GPU tests, default: graphs, lora, groups, ops), BS (decode batches, empty: none,
# default "1 8 64"; BATCH:ADAPTERS, e.g. 256:64, for fewer adapters than requests),
# BENCHC=1 (also the 256-request case, BENCHC_ITERS iterations, default 1). Logs come
# back in $OUT/logs.tgz; the last lines printed are one row per (tree, batch): base and
# LoRA step p50.
# NOTEST="main": trees whose GPU tests are skipped (only built and benched), e.g. a baseline
# whose tests already passed in an earlier run.
# EAGER=1: batch 1 also with --enforce-eager. CINTER=N: after everything else, the
# 256-request case N rounds, one iteration per tree per round, the trees taking turns, so a
# difference of 1% is not the machine drifting between two trees' runs.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/quiver_out}"
mkdir -p "$OUT"
logs=/tmp/compare_logs
rm -rf "$logs" && mkdir -p "$logs"
trap 'tar czf "$OUT/logs.tgz" -C "$logs" .' EXIT
source tools/gpu/setup_deps.sh
deps=$PWD/.deps
targets=${TARGETS:-test_cuda_graphs test_cuda_project test_cuda_lora_delta test_cuda_ops}
summary=()
declare -A benches  # tree -> its bench command, for the CINTER rounds
t0=$SECONDS
for tree in ${TREES:?name the trees under build-trees/}; do
  dir=build-trees/$tree
  log=$logs/$tree
  mkdir -p "$log"
  [ -e "$dir/.deps" ] || ln -s "$deps" "$dir/.deps"
  bash tools/gpu/build_tree.sh "$dir" "$log/build.log" $targets ||
    { echo "$tree: build FAILED"; grep -m5 -A5 error "$log/build.log" || tail -20 "$log/build.log"; continue; }
  echo "$tree: built at $((SECONDS - t0)) s"
  failed=0
  case " ${NOTEST:-} " in *" $tree "*) targets_now= ;; *) targets_now=$targets ;; esac
  for t in $targets_now; do
    timeout 120 "$dir/build-gpu/$t" >"$log/$t.log" 2>&1 || failed=1
    echo "$tree: $t $(grep -E '^\[  (PASSED|FAILED)' "$log/$t.log" | tr '\n' ' ')"
  done
  # Benches run even after a failed test (cheap, and a second GPU run is not): the
  # summary marks the tree.
  [ $failed = 1 ] && summary+=("$tree: tests FAILED (benches below are of a wrong tree)")
  bench=("$dir/build-gpu/quiver" bench --model "$dir/bench/configs/llama-2-7b" --load-format dummy --dtype bfloat16
    --device cuda --lora-rank 16 --lora-dtype bfloat16)
  # The tree's commit, from build-trees/commits ("NAME SHA" lines): a tree has no .git, and
  # a .git copied to the GPU machine may be older than the tree (bench headers would name it).
  commit=$(awk -v t="$tree" '$1 == t { print $2 }' build-trees/commits 2>/dev/null)
  [ -n "$commit" ] && bench+=(--commit "$commit")
  for entry in ${BS-1 8 64}; do  # BS= (empty): no batch benches
    bs=${entry%%:*} adapters=${entry#*:} kv=16GiB
    [ "$bs" -gt 64 ] && kv=48GiB
    timeout 90 "${bench[@]}" --batch-size "$bs" --input-len 128 --output-len 64 --num-adapters "$adapters" --compare base \
      --num-iters 1 --max-num-seqs "$bs" --kv-cache-memory $kv >"$log/bench_b$bs.log" 2>&1
    p50=$(grep -E "^  decode " "$log/bench_b$bs.log" | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ')
    summary+=("$tree: batch $bs over $adapters adapters, decode step p50 (LoRA, base) ms: $p50")
  done
  if [ -n "${EAGER:-}" ]; then
    timeout 60 "${bench[@]}" --batch-size 1 --input-len 128 --output-len 64 --num-adapters 1 --compare base \
      --num-iters 1 --max-num-seqs 1 --kv-cache-memory 16GiB --enforce-eager >"$log/bench_b1_eager.log" 2>&1
    p50=$(grep -E "^  decode " "$log/bench_b1_eager.log" | sed -E 's/.*p50 +([0-9.]+).*/\1/' | tr '\n' ' ')
    summary+=("$tree: batch 1 eager, decode step p50 (LoRA, base) ms: $p50")
  fi
  benches["$tree"]="${bench[*]}"
  if [ -n "${BENCHC:-}" ]; then
    timeout 150 "${bench[@]}" --batch-size 256 --input-len 256 --output-len 128 --num-adapters 64 --num-iters ${BENCHC_ITERS:-1} \
      --warmup-steps 2 --kv-cache-memory 56GiB >"$log/bench_c.log" 2>&1
    summary+=("$tree: 256 requests over 64 adapters: $(grep -E '^  end-to-end' "$log/bench_c.log" | tr -s ' ')")
  fi
done
for round in $(seq 1 "${CINTER:-0}"); do
  for tree in $TREES; do
    [ -n "${benches[$tree]:-}" ] || continue  # not built
    c_log=$logs/$tree/bench_c_round$round.log
    # The words of the bench command have no spaces (paths under build-trees/).
    timeout 90 ${benches[$tree]} --batch-size 256 --input-len 256 --output-len 128 --num-adapters 64 --num-iters 1 \
      --warmup-steps 2 --kv-cache-memory 56GiB >"$c_log" 2>&1
    summary+=("$tree: (c) round $round: $(grep -E '^  end-to-end' "$c_log" | tr -s ' ') decode p50 $(grep -E '^  decode' \
      "$c_log" | sed -E 's/.*p50 +([0-9.]+).*/\1/') ms")
  done
done
echo "total $((SECONDS - t0)) s"
printf '%s\n' "${summary[@]}"
