#!/usr/bin/env bash
# Session 19, call 3, branch exp/s19: why call 2's hand-off words were slower than the
# event join (b32 7.46 against 7.18-7.29). Timing only, no checks (call 2 ran them):
#   X=1             the words (740d46e)
#   QV_EXP_EVJOIN=1 main's event join
#   QV_EXP_NOWAIT=1 neither join nor wait: what removing the join could buy at most (the
#                   op may read t before the shrink wrote it; the numbers mean nothing)
#   QV_EXP_NOPRIO=1 the words with the side stream at the default priority
set -u
T0=$SECONDS
[ -d .deps/debs ] && source tools/gpu/setup_deps.sh
bash tools/gpu/build_tree.sh . $OUT/build.log > $OUT/build.txt 2>&1; tail -2 $OUT/build.txt
echo "build end at $((SECONDS - T0)) s"
export BENCH_UNTIL=420; source tools/gpu/bench_switch.sh
for i in 1 2; do
  bench_switch flag_$i 32 X=1; bench_switch evjoin_$i 32 QV_EXP_EVJOIN=1
  bench_switch nowait_$i 32 QV_EXP_NOWAIT=1; bench_switch noprio_$i 32 QV_EXP_NOPRIO=1
done
bench_switch evjoin 64 QV_EXP_EVJOIN=1; bench_switch nowait 64 QV_EXP_NOWAIT=1; bench_switch noprio 64 QV_EXP_NOPRIO=1
tar czf $OUT/bench_logs.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
