#!/usr/bin/env bash
# Session 12, call 1: GPU tests of main (refactors since 3c3ec54 never GPU-run), fixtures, verify;
# defer-gemv2 tests + batch 1/2 vs main; (c) interleaved main vs 4674d9c, 3 rounds.
set -u
T0=$SECONDS
ln -sfn .. build-trees/main
bash tools/gpu/prebuild_trees.sh "gemv2:test_cuda_groups,test_cuda_graphs" "old:" 
TARGETS="test_cuda_ops test_cuda_lora test_cuda_groups test_cuda_graphs test_cuda_lora_delta" FIX=1 VERIFY=1 OUT=$OUT/main timeout 330 bash tools/gpu/run_checks.sh > $OUT/main.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|^total|PASSED|FAILED|^build" $OUT/main.txt | head -30
echo "checks end at $((SECONDS - T0)) s"
for t in gemv2 old; do while ! ls /tmp/built_$t.* >/dev/null 2>&1; do sleep 2; done; ls /tmp/built_$t.*; done
echo "prebuilds end at $((SECONDS - T0)) s"
TREES="main gemv2" NOTEST="main" TARGETS="test_cuda_groups test_cuda_graphs" BS="1 2" OUT=$OUT/g2 timeout 150 bash tools/gpu/compare_trees.sh > $OUT/g2.txt 2>&1
tail -8 $OUT/g2.txt
echo "gemv2 end at $((SECONDS - T0)) s"
TREES="main old" NOTEST="main old" BS= CINTER=3 OUT=$OUT/c timeout $((585 - (SECONDS - T0))) bash tools/gpu/compare_trees.sh > $OUT/c.txt 2>&1
tail -8 $OUT/c.txt
echo "end at $((SECONDS - T0)) s"
