#!/usr/bin/env bash
# Session 20, call 4, branch exp/s20b: at 17-64 tokens, a side-stream kernel forked before
# the attention prefetches o's A and B and gate/up's A slabs of each token's slot into L2
# (prefetch.global.L2::evict_last), to read them while the attention leaves bandwidth
# unused. QV_EXP_PREFETCH=0 off (main's behaviour), =2 o's slabs only. The graph test
# (capture with the extra side-stream work), then interleaved A/B at 32, 64 and 24 tokens.
set -u
T0=$SECONDS
TARGETS="test_cuda_graphs" OUT=$OUT/checks timeout 240 bash tools/gpu/run_checks.sh > $OUT/checks.txt 2>&1
grep -E "rc=|PASSED|FAILED|^build|error|Failure" $OUT/checks.txt | cut -c1-200 | head -20
echo "checks end at $((SECONDS - T0)) s"
export BENCH_UNTIL=440; source tools/gpu/bench_switch.sh
bench_switch pf 32 X=1
bench_switch off 32 QV_EXP_PREFETCH=0
bench_switch o 32 QV_EXP_PREFETCH=2
bench_switch pf 32 X=1
bench_switch off 32 QV_EXP_PREFETCH=0
bench_switch pf 64 X=1
bench_switch off 64 QV_EXP_PREFETCH=0
bench_switch pf 24 X=1
bench_switch off 24 QV_EXP_PREFETCH=0
bench_switch pf 64 X=1
bench_switch off 64 QV_EXP_PREFETCH=0
tar czf $OUT/bench_logs.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
