#!/usr/bin/env bash
# Prepared in session 18 for the next device call, branch exp/s18b (main 980fcb5 plus
# switches; see bench/RESULTS.md, session 18, call 2). Splits the 0.53 ms a batch-32 LoRA
# step keeps with no LoRA work at all:
#   QV_EXP_SKIP=4  no shrink, no terms; the side stream's fork and join stay (call 2)
#   QV_EXP_SKIP=5  no shrink, no terms, no fork and join either
#   QV_EXP_PJOIN=1 everything as main, but in graphs the join is a programmatic edge from
#                  the shrink's node to the op after the matmul (keeps that op's PDL)
# PJOIN changes only the graphs' edges, so it needs the graph tests and verify first.
set -u
T0=$SECONDS
QV_EXP_PJOIN=1 TARGETS="test_cuda_graphs test_cuda_lora_delta test_cuda_groups" VERIFY=1 OUT=$OUT/pjoin \
  timeout 260 bash tools/gpu/run_checks.sh > $OUT/pjoin.txt 2>&1
grep -E "rc=|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/pjoin.txt | cut -c1-150 | head -20
echo "checks end at $((SECONDS - T0)) s"
export BENCH_UNTIL=520; source tools/gpu/bench_switch.sh
for i in 1 2; do
  bench_switch main_$i 32 X=1; bench_switch skip4_$i 32 QV_EXP_SKIP=4
  bench_switch skip5_$i 32 QV_EXP_SKIP=5; bench_switch pjoin_$i 32 QV_EXP_PJOIN=1
done
bench_switch main 64 X=1; bench_switch skip5 64 QV_EXP_SKIP=5; bench_switch pjoin 64 QV_EXP_PJOIN=1
tar czf $OUT/bench_logs.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
