#!/usr/bin/env bash
# Session 19, call 5 (the last 4.8 device minutes), branch exp/s19b: SiLU·mul with the
# gate/up term four elements a thread in one pass (silu_mul_delta4_kernel), the default
# there; QV_EXP_SILU4=0 restores main's one-element kernel. The delta test (now also 32
# tokens) and the graph test, then batch 32 both ways.
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_delta test_cuda_graphs" OUT=$OUT/checks timeout 175 bash tools/gpu/run_checks.sh > $OUT/checks.txt 2>&1
grep -E "rc=|FAIL|PASSED|FAILED|^build|error|Failure" $OUT/checks.txt | cut -c1-150 | head -12
grep -E "silu_mul_x16.*n=32 .*11008" /tmp/diag_logs/test_cuda_lora_delta.log | head -3
echo "checks end at $((SECONDS - T0)) s"
export BENCH_UNTIL=200; source tools/gpu/bench_switch.sh
bench_switch silu4 32 X=1; bench_switch silu1 32 QV_EXP_SILU4=0
bench_switch silu4_2 32 X=1; bench_switch silu1_2 32 QV_EXP_SILU4=0
echo "end at $((SECONDS - T0)) s"
