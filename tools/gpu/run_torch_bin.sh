#!/usr/bin/env bash
# Run THERE (the GPU machine: torch + transformers + peft): builds quiver with build_tree.sh and
# runs tools/gpu/check_torch_bin.py on the CPU and on CUDA: real torch.save adapter_model.bin
# files (float32, bfloat16, float16, and the legacy format) against their safetensors twins,
# and the committed test file's layout against real torch.save's.
# Usage (from the repo root): bash tools/gpu/run_torch_bin.sh
# Outputs: $OUT/build.log, $OUT/{cpu,cuda}/check_torch_bin.json; one PASS/FAIL line per check.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/quiver_out}"
mkdir -p "$OUT"
[ -d .deps/debs ] && source tools/gpu/setup_deps.sh
bash tools/gpu/build_tree.sh . "$OUT/build.log" || { tail -20 "$OUT/build.log"; exit 1; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
status=0
for device in cpu cuda; do
  echo "-- $device"
  python3 tools/gpu/check_torch_bin.py --quiver build-gpu/quiver --device "$device" --out "$OUT/$device" || status=1
done
exit $status
