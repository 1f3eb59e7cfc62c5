#!/usr/bin/env bash
# Session 12, call 3: attn-grid (checkout): attention/graphs/ops GPU tests, fixtures, verify;
# then 256:64 decode and (c) interleaved against main 6cc08ed (base).
set -u
T0=$SECONDS
ln -sfn .. build-trees/new
bash tools/gpu/prebuild_trees.sh "base:"
TARGETS="test_cuda_attention test_cuda_graphs test_cuda_ops" FIX=1 VERIFY=1 OUT=$OUT/new timeout 330 bash tools/gpu/run_checks.sh > $OUT/new.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|^total|PASSED|FAILED|^build|error" $OUT/new.txt | head -30
echo "checks end at $((SECONDS - T0)) s"
while ! ls /tmp/built_base.* >/dev/null 2>&1; do sleep 2; done; ls /tmp/built_base.*
TREES="new base" NOTEST="new base" BS="256:64" CINTER=2 OUT=$OUT/c timeout $((545 - (SECONDS - T0))) bash tools/gpu/compare_trees.sh > $OUT/c.txt 2>&1
tail -8 $OUT/c.txt
echo "end at $((SECONDS - T0)) s"
