#!/usr/bin/env bash
# Session 20, call 3, main: a peer for issue 6's (b) in the same machine start. quiver's
# 7B decode bench (LoRA against base, every request on its own r=16 adapter, graphs) at
# batch 1, 8, 32 and 64, then Hugging Face transformers + PEFT on the same shape
# (tools/gpu/peer_hf_peft.py: eager, dynamic cache, PEFT's mixed-batch adapter_names).
set -u
T0=$SECONDS
[ -d .deps/debs ] && source tools/gpu/setup_deps.sh
bash tools/gpu/build_tree.sh . $OUT/build.log; echo "build rc=$? at $((SECONDS - T0)) s"
export BENCH_UNTIL=300; source tools/gpu/bench_switch.sh
for b in 1 8 32 64; do bench_switch main $b X=1; done
tar czf $OUT/bench_logs.tgz -C $BENCH_LOGS . 2>/dev/null
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
timeout $((540 - (SECONDS - T0))) python3 tools/gpu/peer_hf_peft.py --config bench/configs/llama-2-7b \
  --batches 1,8,32,64 --json $OUT/peer_hf_peft.json 2>&1 | grep -vE "Warning|warn" | tail -20
echo "end at $((SECONDS - T0)) s"
