#!/usr/bin/env bash
# Session 20, call 2, branch exp/s20 (= next/side-expand e55181a + QV_EXP_SIDE_EXPAND=0,
# which turns the side expand off: main's behaviour). The GPU checks the candidate needs
# to land (five GPU test binaries incl. the consumers fed dy, every HF fixture, verify),
# then an interleaved A/B of the 7B decode step with LoRA at 24, 32, 48 and 64 tokens.
set -u
T0=$SECONDS
TARGETS="test_cuda_lora_delta test_cuda_graphs test_cuda_lora test_cuda_groups test_cuda_ops" FIX=1 VERIFY=1 \
  OUT=$OUT/checks timeout 330 bash tools/gpu/run_checks.sh > $OUT/checks.txt 2>&1
grep -E "rc=|ALL OK|FAIL|^verify|PASSED|FAILED|^build|error|Failure" $OUT/checks.txt | cut -c1-200 | head -40
echo "checks end at $((SECONDS - T0)) s"
export BENCH_UNTIL=480; source tools/gpu/bench_switch.sh
for i in 1 2; do
  bench_switch dy 32 X=1
  bench_switch off 32 QV_EXP_SIDE_EXPAND=0
done
for i in 1 2; do
  bench_switch dy 64 X=1
  bench_switch off 64 QV_EXP_SIDE_EXPAND=0
done
bench_switch dy 24 X=1
bench_switch off 24 QV_EXP_SIDE_EXPAND=0
bench_switch dy 48 X=1
bench_switch off 48 QV_EXP_SIDE_EXPAND=0
tar czf $OUT/bench_logs.tgz -C $BENCH_LOGS . 2>/dev/null
echo "end at $((SECONDS - T0)) s"
