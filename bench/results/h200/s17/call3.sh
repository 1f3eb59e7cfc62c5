#!/usr/bin/env bash
# Session 17, call 3, main (159257b code): per-kernel times (ncu, eager, kernels serialised)
# of the first decode step at batch 32 with every request on its own adapter (r=16, bf16
# stacks), to see where the LoRA's 1.27 ms a step (in graphs) sit kernel by kernel.
set -u
T0=$SECONDS
NCU=1 NCU_BS=32 NCU_IN=128 NCU_ADAPTERS=32 NCU_COUNT=1400 NCU_SHOW="2" NCU_T=240 OUT=$OUT/ncu \
  timeout 500 bash tools/gpu/run_checks.sh > $OUT/ncu32.txt 2>&1
cat $OUT/ncu32.txt | cut -c1-200
echo "end at $((SECONDS - T0)) s"
