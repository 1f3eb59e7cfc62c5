#!/usr/bin/env bash
# quiver against llama.cpp on the CPU, on the same random TinyLlama-1.1B-shaped checkpoint.
#
# What it measures (both engines, THREADS threads, llama.cpp and quiver alternating in every
# round, ROUNDS rounds; one table of medians and ranges at the end):
#   prefill       a PP-token prompt: llama-bench -p PP -n 0, against
#                 quiver bench --batch-size 1 --input-len PP --output-len 2 --warmup-steps 0
#   decode        TG tokens at batch 1: llama-bench -p 0 -n TG (KV depth 0..TG-1), against
#                 quiver bench --input-len TG --output-len TG (KV depth TG..2TG-1)
#   decode_depth  TG tokens at KV depth DEPTH..DEPTH+TG-1: llama-bench -p 0 -n TG -d DEPTH,
#                 against quiver bench --input-len DEPTH --output-len TG
#   lora          TG tokens at batch 1 after a TG-token prompt, one r=16 adapter on all 7
#                 projections: llama-completion --lora (its 'eval time'; llama-bench takes no
#                 adapter), against quiver bench --num-adapters 1 (the same adapter files).
#                 llama-completion also runs without the adapter, for each engine's adapter cost.
# Each engine keeps its own defaults otherwise (llama.cpp: f16 KV cache, flash attention
# auto; quiver: float32 KV cache, float32 LoRA stacks).
#
# The model: WORK/model, a Hugging Face checkpoint written by tools/peer_llama_cpp.py
# (config bench/configs/tinyllama-1.1b, random bfloat16 weights at the scales of
# --load-format dummy, the 32,000-id tokenizer of tests/fixtures/tokenizers/mistral plus a
# SentencePiece tokenizer.model with the same pieces). The adapter: WORK/adapters/bench-0,
# written by `quiver bench --num-adapters 1 --adapter-dir` (PEFT layout, bfloat16), which
# rewrites the same bytes on every run (checked by sha256). llama.cpp reads GGUF files made
# from these by its own converters (convert_hf_to_gguf.py --outtype bf16,
# convert_lora_to_gguf.py), and `peer_llama_cpp.py check` proves that every GGUF tensor holds
# the values of its source.
#
# llama.cpp is pinned to LLAMA_CPP_COMMIT below. The source comes from a local git directory
# holding that commit (no network): it is extracted with git archive into WORK/llama.cpp.
# This script does not build llama.cpp: build llama-bench and llama-completion from
# WORK/llama.cpp (CPU only, Release, native flags) into WORK/llama.cpp/build/bin, or point
# LLAMA_CPP_BIN at them; they must report the pinned commit (`llama-completion --version`).
# The converters run on Debian 12's packages, installed here with apt (see
# peer_llama_cpp.py run_converter for the two stand-ins that Debian 12 needs).
#
#   tools/peer_llama_cpp.sh WORK [LLAMA_CPP_GIT]
#   e.g. tools/peer_llama_cpp.sh /work/peer /path/to/llama.cpp.git
# Environment: LLAMA_CPP_GIT (git directory, if not the second argument), LLAMA_CPP_BIN,
# QUIVER (default build/quiver), QUIVER_FLAGS (more `quiver bench` flags), ROUNDS (3),
# THREADS (2), PP (512), TG (128), DEPTH (512), PREPARE_ONLY=1 (stop after the files).
# Writes WORK/runs/<UTC time>/: every raw output, load.txt, meta.json; prints the table.
set -euo pipefail

LLAMA_CPP_COMMIT=d775b8967a46d8beb110d444aa3b8938179e0dd8  # release tag b10573

die() { echo "peer_llama_cpp: $*" >&2; exit 1; }

root="$(cd "$(dirname "$0")/.." && pwd)"
helper="$root/tools/peer_llama_cpp.py"
[[ $# -ge 1 ]] || die "usage: tools/peer_llama_cpp.sh WORK [LLAMA_CPP_GIT]"
mkdir -p "$1" || die "cannot create the work folder $1"
work="$(cd "$1" && pwd)"
git_dir=${2:-${LLAMA_CPP_GIT:-}}
rounds=${ROUNDS:-3}; threads=${THREADS:-2}; pp=${PP:-512}; tg=${TG:-128}; depth=${DEPTH:-512}
quiver=${QUIVER:-$root/build/quiver}
py=/usr/bin/python3  # Debian's interpreter: the apt packages below install for it
src="$work/llama.cpp"
bin=${LLAMA_CPP_BIN:-$src/build/bin}
model="$work/model"
adapter="$work/adapters/bench-0"
model_gguf="$work/gguf/model-bf16.gguf"
lora_gguf="$work/gguf/lora-bench-0-bf16.gguf"

# ---- llama.cpp source at the pinned commit --------------------------------------------------
if [[ "$(cat "$src/.pinned-commit" 2>/dev/null)" != "$LLAMA_CPP_COMMIT" ]]; then
  [[ -n "$git_dir" ]] || die "no llama.cpp source in $src: pass a git directory holding $LLAMA_CPP_COMMIT (second argument or LLAMA_CPP_GIT)"
  git --git-dir="$git_dir" rev-parse -q --verify "$LLAMA_CPP_COMMIT^{commit}" >/dev/null 2>&1 ||
    die "$git_dir is not a git directory holding llama.cpp commit $LLAMA_CPP_COMMIT"
  echo "extracting llama.cpp $LLAMA_CPP_COMMIT into $src"
  rm -rf "$src.tmp" && mkdir -p "$src.tmp"
  # The tokenizer test vocabularies (models/*.gguf) are left out: nothing here needs them,
  # and a partial mirror may lack their large blobs.
  git --git-dir="$git_dir" archive "$LLAMA_CPP_COMMIT" -- . ':(exclude)models/*.gguf' 2>"$work/archive.err" |
    tar -x -C "$src.tmp" || { cat "$work/archive.err" >&2; die "git archive of $LLAMA_CPP_COMMIT failed"; }
  [[ -f "$src.tmp/convert_hf_to_gguf.py" && -f "$src.tmp/CMakeLists.txt" ]] || die "the extracted tree is incomplete"
  echo "$LLAMA_CPP_COMMIT" >"$src.tmp/.pinned-commit"
  rm -f "$work/archive.err"
  rm -rf "$src" && mv "$src.tmp" "$src"
fi

# ---- llama.cpp binaries -------------------------------------------------------------------
for t in llama-bench llama-completion; do
  [[ -x "$bin/$t" ]] || die "no $bin/$t: build llama-bench and llama-completion from $src (CPU only, Release, native flags) into $src/build/bin, or set LLAMA_CPP_BIN"
done
built=$("$bin/llama-completion" --version 2>&1 | grep -o 'commit [0-9a-f]*' | cut -d' ' -f2 || true)
[[ -n "$built" && "$LLAMA_CPP_COMMIT" == "$built"* ]] ||
  die "$bin/llama-completion reports commit '${built:-none}', not ${LLAMA_CPP_COMMIT:0:7} (rebuild from $src with its commit given to CMake as LLAMA_BUILD_COMMIT)"
[[ -x "$quiver" ]] || die "no quiver binary at $quiver (build it, or set QUIVER)"

# ---- Python packages for the model writer and the converters (Debian 12) -------------------
if ! "$py" -c 'import numpy, torch, sentencepiece, google.protobuf, tqdm, yaml' 2>/dev/null; then
  sudo=; [[ $(id -u) -eq 0 ]] || sudo=sudo
  echo "installing the converters' Python packages with apt"
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends python3-numpy python3-torch python3-sentencepiece \
    python3-protobuf python3-tqdm python3-yaml || die "apt-get install failed"
fi

# ---- the checkpoint, the adapter and their GGUF files --------------------------------------
qbench=("$quiver" bench --model "$model" --device cpu --threads "$threads")
if [[ ! -f "$model/model.safetensors" ]]; then
  echo "writing the random checkpoint $model"
  "$py" "$helper" model "$root/bench/configs/tinyllama-1.1b" "$root/tests/fixtures/tokenizers/mistral" "$model" ||
    die "writing the checkpoint failed"
fi
if [[ ! -f "$adapter/adapter_model.safetensors" ]]; then
  echo "writing the adapter $adapter with quiver bench"
  "${qbench[@]}" --batch-size 1 --input-len 8 --output-len 2 --warmup-steps 0 --num-adapters 1 \
    --adapter-dir "$work/adapters" >"$work/adapter-write.log" 2>&1 || { tail -20 "$work/adapter-write.log" >&2; die "quiver bench could not write the adapter"; }
fi
adapter_sum=$(sha256sum "$adapter/adapter_model.safetensors" | cut -d' ' -f1)
mkdir -p "$work/gguf"
if [[ ! -f "$model_gguf" || "$model_gguf" -ot "$model/model.safetensors" ]]; then
  echo "converting $model to $model_gguf"
  "$py" "$helper" convert "$src/convert_hf_to_gguf.py" "$model" --outtype bf16 --outfile "$model_gguf" \
    >"$work/gguf/convert-model.log" 2>&1 || { tail -20 "$work/gguf/convert-model.log" >&2; die "convert_hf_to_gguf.py failed"; }
fi
if [[ ! -f "$lora_gguf" || "$lora_gguf" -ot "$adapter/adapter_model.safetensors" ]]; then
  echo "converting $adapter to $lora_gguf"
  # The converter reads adapter_model.safetensors through the safetensors package, which
  # Debian 12 lacks; it reads adapter_model.bin through torch. The .bin holds the same tensors.
  rm -rf "$work/gguf/adapter-bin"
  "$py" "$helper" bin-adapter "$adapter" "$work/gguf/adapter-bin/bench-0" >/dev/null || die "writing adapter_model.bin failed"
  "$py" "$helper" convert "$src/convert_lora_to_gguf.py" "$work/gguf/adapter-bin/bench-0" --base "$model" \
    --outtype bf16 --outfile "$lora_gguf" >"$work/gguf/convert-lora.log" 2>&1 ||
    { tail -20 "$work/gguf/convert-lora.log" >&2; die "convert_lora_to_gguf.py failed"; }
fi
"$py" "$helper" check "$src" "$model" "$model_gguf" "$adapter" "$lora_gguf" || die "the GGUF files do not hold the checkpoint's values"
# llama.cpp must load and apply the adapter (its loader logs this only at -lv 4).
"$bin/llama-completion" -m "$model_gguf" --lora "$lora_gguf" -t "$threads" -c 64 -no-cnv --temp 0 -n 1 -p "the" -lv 4 \
  </dev/null >/dev/null 2>"$work/gguf/lora-load.log" || { tail -20 "$work/gguf/lora-load.log" >&2; die "llama-completion failed with the adapter"; }
grep -q 'tensors from lora file' "$work/gguf/lora-load.log" || die "llama-completion did not load the adapter (see $work/gguf/lora-load.log)"
[[ "${PREPARE_ONLY:-0}" == 1 ]] && { echo "prepared $work"; exit 0; }

# ---- the rounds ---------------------------------------------------------------------------
run="$work/runs/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$run"
"$py" -c 'import json, sys; k = ["llama_cpp_commit", "threads", "rounds", "pp", "tg", "depth", "cpu", "model", "quiver"]
v = sys.argv[1:]; d = dict(zip(k, v)); [d.__setitem__(x, int(d[x])) for x in ("threads", "rounds", "pp", "tg", "depth")]
print(json.dumps(d, indent=1))' "$LLAMA_CPP_COMMIT" "$threads" "$rounds" "$pp" "$tg" "$depth" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) ($(nproc) cores)" "$model" "$quiver" >"$run/meta.json"

prompt=$(printf 'the %.0s' $(seq $((tg - 1))))  # BOS + TG-1 words of one token each: TG tokens
prompt=${prompt% }
read -r -a qextra <<<"${QUIVER_FLAGS:-}"

run_llama() {  # KEY ROUND tool args...: stdout to the result file, stderr to .err
  local key=$1 r=$2 tool=$3; shift 3
  cut -d' ' -f1-3 /proc/loadavg >>"$run/load.txt"
  echo "  $key r$r llama.cpp"
  if [[ $tool == llama-bench ]]; then
    "$bin/llama-bench" -m "$model_gguf" -t "$threads" -r 1 -o jsonl "$@" \
      >"$run/$key.r$r.llama.jsonl" 2>"$run/$key.r$r.llama.err" || { tail -20 "$run/$key.r$r.llama.err" >&2; die "llama-bench failed ($key)"; }
  else  # llama-completion: the timings are in its log
    "$bin/llama-completion" -m "$model_gguf" -t "$threads" -c $((2 * tg + 64)) -no-cnv --temp 0 --ignore-eos \
      -n "$tg" -p "$prompt" "$@" </dev/null >"$run/$key.r$r.llama.out" 2>"$run/$key.r$r.llama.txt" ||
      { tail -20 "$run/$key.r$r.llama.txt" >&2; die "llama-completion failed ($key)"; }
  fi
}
run_quiver() {  # KEY ROUND quiver-bench-args...
  local key=$1 r=$2; shift 2
  cut -d' ' -f1-3 /proc/loadavg >>"$run/load.txt"
  echo "  $key r$r quiver"
  (cd "$root" && "${qbench[@]}" "$@" "${qextra[@]}" --json-output "$run/$key.r$r.quiver.json") \
    >"$run/$key.r$r.quiver.err" 2>&1 || { tail -20 "$run/$key.r$r.quiver.err" >&2; die "quiver bench failed ($key)"; }
}

for r in $(seq "$rounds"); do
  echo "round $r of $rounds"
  run_llama prefill "$r" llama-bench -p "$pp" -n 0
  run_quiver prefill "$r" --batch-size 1 --input-len "$pp" --output-len 2 --warmup-steps 0
  run_llama decode "$r" llama-bench -p 0 -n "$tg"
  run_quiver decode "$r" --batch-size 1 --input-len "$tg" --output-len "$tg"
  run_llama decode_depth "$r" llama-bench -p 0 -n "$tg" -d "$depth"
  run_quiver decode_depth "$r" --batch-size 1 --input-len "$depth" --output-len "$tg"
  run_llama lora "$r" llama-completion --lora "$lora_gguf"
  run_quiver lora "$r" --batch-size 1 --input-len "$tg" --output-len "$tg" --num-adapters 1 --adapter-dir "$work/adapters"
  [[ "$(sha256sum "$adapter/adapter_model.safetensors" | cut -d' ' -f1)" == "$adapter_sum" ]] ||
    die "quiver bench rewrote $adapter with other bytes: the GGUF adapter no longer matches"
  run_llama lora_base "$r" llama-completion
done

echo
"$py" "$helper" table "$run" | tee "$run/table.txt"
