#!/usr/bin/env bash
# Session 18, call 4, exp/s18c at 86b0ce2: call 3's benches with norm_shrink on aborted (o's
# pending shrink stayed in the model's LoraDelta for gate/up; project() now starts from an
# empty one). test_cuda_lora_delta, then batch 32 on / off and 64 on / off as time allows.
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_delta" OUT=$OUT/checks timeout 150 bash tools/gpu/run_checks.sh > $OUT/checks.txt 2>&1
grep -E "rc=|^build" $OUT/checks.txt | head
echo "checks end at $((SECONDS - T0)) s"
export BENCH_UNTIL=170; source tools/gpu/bench_switch.sh
bench_switch on_1 32 X=1; bench_switch off_1 32 QV_EXP_NORM_SHRINK=0
bench_switch on_2 32 X=1; bench_switch off_2 32 QV_EXP_NORM_SHRINK=0
bench_switch on 64 X=1; bench_switch off 64 QV_EXP_NORM_SHRINK=0
grep -h "internal error" $BENCH_LOGS/*.log | head -3
tar czf $OUT/bench_logs.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
