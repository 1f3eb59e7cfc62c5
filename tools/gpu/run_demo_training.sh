#!/usr/bin/env bash
# Trains the demo model on the GPU machine and packs everything into one gzipped tar laid out
# like the repository (models/demo/..., tests/fixtures/demo_sql_*.jsonl), cut into pieces of
# 15 MiB ($OUT/demo.tgz.00, .01, ...) because a run on the GPU machine returns files of at most 16 MiB:
#   cat demo.tgz.* | tar xzf - -C /work/main
# Needs .demo_data/corpus carried from the dev machine (tools/prepare_demo_data.sh makes it).
# Extra arguments go to tools/train_demo.py (e.g. --pretrain-seconds 120).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?OUT must name the folder whose files come back}"
[ -f .demo_data/corpus/brown.txt ] || { echo "missing .demo_data/corpus (carry it)" >&2; exit 2; }
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
work="$OUT/demo"
rm -rf "$work" && mkdir -p "$work/models/demo"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
python3 tools/train_demo.py --data .demo_data/corpus --out "$work" "$@" 2>&1 \
  | tee "$work/models/demo/train_log.txt"
rc=${PIPESTATUS[0]}
# Pack whatever was written, also on failure, so the log and partial results come back.
tar czf "$OUT/demo.tgz" -C "$work" . && rm -rf "$work" &&
  split -b 15m -d -a 2 "$OUT/demo.tgz" "$OUT/demo.tgz." && rm "$OUT/demo.tgz"
ls -la "$OUT"
echo "train_demo.py exit status: $rc"
exit "$rc"
