#!/usr/bin/env bash
# Session 18, call 2, branch exp/s18b (main 980fcb5 + QV_EXP_SKIP, timing only: the outputs
# are wrong with it on). Where batch 32's and 64's LoRA cost goes in the graph step:
#   1: no token shrink launch (the consumers still add B . t from a stale t)
#   2: no token shrink for the groups of 2-3 members (q/k/v, gate/up; the ones a norm feeds)
#   3: shrink launched, no deferred expand (the consumers run their plain kernels)
#   4: neither (the side stream's fork and join are all that is left)
set -u
T0=$SECONDS
[ -d .deps/debs ] && source tools/gpu/setup_deps.sh
bash tools/gpu/build_tree.sh . $OUT/build.log || { tail -20 $OUT/build.log; exit 1; }
echo "build at $((SECONDS - T0)) s"
export BENCH_UNTIL=420; source tools/gpu/bench_switch.sh
for i in 1 2; do for s in 0 1 2 3 4; do bench_switch skip${s}_$i 32 QV_EXP_SKIP=$s; done; done
for s in 0 1 2 3 4; do bench_switch skip${s} 64 QV_EXP_SKIP=$s; done
tar czf $OUT/bench_logs.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
