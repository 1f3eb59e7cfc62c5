#!/usr/bin/env bash
# Session 15, call 4 (7c28d49): where batch 8's LoRA cost is. ncu, eager, kernel times of one
# batch-8 decode forward (8 prompts of 16 tokens) with 8 adapters and with none, as session
# 13's call 1 did on c0aec88; then batch 8 graphs again.
set -u
T0=$SECONDS
for a in 8 0; do
  TARGETS=test_cuda_lora_delta NCU=1 NCU_BS=8 NCU_IN=16 NCU_ADAPTERS=$a NCU_COUNT=1600 NCU_T=150 NCU_SHOW="2" \
    OUT=$OUT/ncu_b8_a$a timeout 330 bash tools/gpu/run_checks.sh > $OUT/ncu_b8_a$a.txt 2>&1
  grep -E "^build|^ncu|^forward|^ +[0-9.]+ us" $OUT/ncu_b8_a$a.txt | head -19
  echo "ncu a=$a end at $((SECONDS - T0)) s"
done
echo "end at $((SECONDS - T0)) s"
