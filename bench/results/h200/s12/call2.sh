#!/usr/bin/env bash
# Session 12, call 2: main (6cc08ed, defer-gemv2 merged): fixtures + verify + ncu of one
# decode step at 256 tokens over 64 adapters; defer-256 tests; (c) main vs d256 interleaved.
set -u
T0=$SECONDS
ln -sfn .. build-trees/main
bash tools/gpu/prebuild_trees.sh "d256:test_cuda_groups,test_cuda_graphs,test_cuda_lora_delta"
TARGETS="test_cuda_groups" FIX=1 VERIFY=1 NCU=1 NCU_BS=256 NCU_IN=1 NCU_ADAPTERS=64 NCU_COUNT=2400 NCU_T=120 OUT=$OUT/main timeout 420 bash tools/gpu/run_checks.sh > $OUT/main.txt 2>&1
grep -vE "^ +[0-9.]+ us" $OUT/main.txt | head -30
echo "checks end at $((SECONDS - T0)) s"
while ! ls /tmp/built_d256.* >/dev/null 2>&1; do sleep 2; done; ls /tmp/built_d256.*
TREES="main d256" NOTEST="main" TARGETS="test_cuda_groups test_cuda_graphs test_cuda_lora_delta" BS="256:64" CINTER=2 OUT=$OUT/c timeout $((590 - (SECONDS - T0))) bash tools/gpu/compare_trees.sh > $OUT/c.txt 2>&1
tail -12 $OUT/c.txt
echo "end at $((SECONDS - T0)) s"
