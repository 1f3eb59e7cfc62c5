#!/usr/bin/env bash
# Builds the e2e reference fixtures on the GPU machine (the one with torch + transformers 5 + peft)
# and packs them into ONE file under $OUT, because a run there brings back only a few files.
# Usage (from the repo root, on the GPU machine): bash tools/gpu/run_fixtures.sh
# Then, on the dev machine: tar xzf <files_at>/fixtures.tgz -C /tmp && cp -r /tmp/fixtures/. tests/fixtures/
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?OUT must name the folder whose files come back (the GPU runner sets it)}"

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
rm -rf "$OUT/fixtures"
python3 -u tools/make_fixtures.py --out "$OUT/fixtures" 2>&1 | tee "$OUT/make_fixtures.log"
# The long-prompt references run on the new weights: in this copy's tests/fixtures, then
# into the archive beside them.
cp -r "$OUT/fixtures/." tests/fixtures/
python3 -u tools/make_long_fixtures.py 2>&1 | tee -a "$OUT/make_fixtures.log"
for dir in "$OUT"/fixtures/*/; do
  name=$(basename "$dir")
  if [ -f "tests/fixtures/$name/long_requests.jsonl" ]; then cp tests/fixtures/"$name"/long_*.jsonl "$dir"; fi
done
tar czf "$OUT/fixtures.tgz" -C "$OUT" fixtures
rm -rf "$OUT/fixtures"  # only the archive and the log come back
ls -l "$OUT"
