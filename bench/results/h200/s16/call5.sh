#!/usr/bin/env bash
# Session 16, call 5, main after the norm.cu split (norm_lora.cu): the delta-norm and graph
# tests and verify, within the session's last device minutes.
TARGETS="test_cuda_lora_delta test_cuda_graphs" VERIFY=1 OUT=$OUT/new timeout 220 bash tools/gpu/run_checks.sh 2>&1 |
  grep -E "rc=|^verify|PASSED|FAILED|^build|error|Failure" | cut -c1-150
