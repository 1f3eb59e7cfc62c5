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
#   mixed4x4      4 requests on 4 different r=16 adapters (all 7 projections), sent at once;
#   mixed16x8     16 requests over 8 adapters (request i on adapter i mod 8: 2 each), sent at
#                 once. Prompt MIXED_IN random token ids, MIXED_OUT output tokens (greedy,
#                 EOS ignored): 128 and 64, the lengths of the earlier online runs (bench/
#                 RESULTS.md, "Online load on the CPU, 16 requests over 8 adapters"). The wall
#                 time from the first request to the last reply, and output tok/s:
#                 llama-server with every adapter loaded (--lora A0,A1,..., --lora-init-without-apply,
#                 and every default scale set to 0 through /lora-adapters at start-up: none
#                 applied unless requested), one slot a request (--parallel 4 and 16), on
#                 127.0.0.1, each request choosing its adapter with the `lora` field of
#                 /completion ([{"id": i, "scale": 1}]), all sent by concurrent client threads
#                 (peer_llama_cpp.py serve; every reply must hold MIXED_OUT tokens after MIXED_IN
#                 prompt tokens, and at start-up each adapter must change a greedy completion;
#                 the byte tokens <0x80>..<0xFF> are kept out of llama-server's output by
#                 logit_bias, since it answers text that is not UTF-8 with an error),
#                 against quiver bench --batch-size 4 / 16 --num-adapters 4 / 8 (one offline
#                 pass, all requests submitted together; its end-to-end time). Server start-up
#                 and quiver's model load and warm-up pass are outside the wall time.
# Each engine keeps its own defaults otherwise (llama.cpp: f16 KV cache, flash attention
# auto; quiver: float32 KV cache, float32 LoRA stacks).
#
# The model: WORK/model, a Hugging Face checkpoint written by tools/peer_llama_cpp.py
# (config bench/configs/tinyllama-1.1b, random bfloat16 weights at the scales of
# --load-format dummy, the 32,000-id tokenizer of tests/fixtures/tokenizers/mistral plus a
# SentencePiece tokenizer.model with the same pieces). The adapters: WORK/adapters/bench-0
# (and bench-1..7 for the mixed workloads), written by `quiver bench --num-adapters N
# --adapter-dir` (PEFT layout, bfloat16; adapter i's bytes depend only on i), which rewrites
# the same bytes on every run (checked by sha256). llama.cpp reads GGUF files made
# from these by its own converters (convert_hf_to_gguf.py --outtype bf16,
# convert_lora_to_gguf.py), and `peer_llama_cpp.py check` proves that every GGUF tensor holds
# the values of its source.
#
# llama.cpp is pinned to LLAMA_CPP_COMMIT below. The source comes from a local git directory
# holding that commit (no network): it is extracted with git archive into WORK/llama.cpp.
# This script does not build llama.cpp: build llama-bench, llama-completion and (for the
# mixed workloads) llama-server from WORK/llama.cpp (CPU only, Release, native flags) into
# WORK/llama.cpp/build/bin, or point LLAMA_CPP_BIN at them; they must report the pinned
# commit (`--version`).
# The converters run on Debian 12's packages, installed here with apt (see
# peer_llama_cpp.py run_converter for the two stand-ins that Debian 12 needs).
#
#   tools/peer_llama_cpp.sh WORK [LLAMA_CPP_GIT]
#   e.g. tools/peer_llama_cpp.sh /work/peer /path/to/llama.cpp.git
# Environment: LLAMA_CPP_GIT (git directory, if not the second argument), LLAMA_CPP_BIN,
# QUIVER (default build/quiver), QUIVER_FLAGS (more `quiver bench` flags), ROUNDS (3),
# THREADS (2), PP (512), TG (128), DEPTH (512), MIXED_IN (128), MIXED_OUT (64),
# ONLY (the workloads to run, default all: "prefill decode decode_depth lora mixed4x4
# mixed16x8"; lora includes its run without the adapter), PREPARE_ONLY=1 (stop after the files).
# Writes WORK/runs/<UTC time>/: every raw output (llama-server's log as KEY.rN.llama.log),
# load.txt, meta.json; prints the table.
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
mixed_in=${MIXED_IN:-128}; mixed_out=${MIXED_OUT:-64}
only=" ${ONLY:-prefill decode decode_depth lora mixed4x4 mixed16x8} "
for w in $only; do
  [[ " prefill decode decode_depth lora mixed4x4 mixed16x8 " == *" $w "* ]] || die "ONLY: unknown workload $w"
done
want() { [[ "$only" == *" $1 "* ]]; }
n_adapters=1  # adapters to write and convert: bench-0 .. bench-(n-1)
want mixed4x4 && n_adapters=4
want mixed16x8 && n_adapters=8
quiver=${QUIVER:-$root/build/quiver}
py=/usr/bin/python3  # Debian's interpreter: the apt packages below install for it
src="$work/llama.cpp"
bin=${LLAMA_CPP_BIN:-$src/build/bin}
model="$work/model"
model_gguf="$work/gguf/model-bf16.gguf"
lora_gguf="$work/gguf/lora-bench-0-bf16.gguf"  # adapter bench-I: lora-bench-I-bf16.gguf

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
tools=(llama-bench llama-completion)
{ want mixed4x4 || want mixed16x8; } && tools+=(llama-server)
for t in "${tools[@]}"; do
  [[ -x "$bin/$t" ]] || die "no $bin/$t: build ${tools[*]} from $src (CPU only, Release, native flags) into $src/build/bin, or set LLAMA_CPP_BIN"
  [[ $t == llama-bench ]] && continue  # it has no --version
  built=$("$bin/$t" --version 2>&1 | grep -o 'commit [0-9a-f]*' | cut -d' ' -f2 || true)
  [[ -n "$built" && "$LLAMA_CPP_COMMIT" == "$built"* ]] ||
    die "$bin/$t reports commit '${built:-none}', not ${LLAMA_CPP_COMMIT:0:7} (rebuild from $src with its commit given to CMake as LLAMA_BUILD_COMMIT)"
done
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
if [[ ! -f "$work/adapters/bench-$((n_adapters - 1))/adapter_model.safetensors" ]]; then
  echo "writing $n_adapters adapter(s) into $work/adapters with quiver bench"
  "${qbench[@]}" --batch-size 1 --input-len 8 --output-len 2 --warmup-steps 0 --num-adapters "$n_adapters" \
    --adapter-dir "$work/adapters" >"$work/adapter-write.log" 2>&1 || { tail -20 "$work/adapter-write.log" >&2; die "quiver bench could not write the adapters"; }
fi
adapter_sums() { local i; for ((i = 0; i < n_adapters; i++)); do sha256sum "$work/adapters/bench-$i/adapter_model.safetensors"; done; }
adapter_sum=$(adapter_sums)
mkdir -p "$work/gguf"
if [[ ! -f "$model_gguf" || "$model_gguf" -ot "$model/model.safetensors" ]]; then
  echo "converting $model to $model_gguf"
  "$py" "$helper" convert "$src/convert_hf_to_gguf.py" "$model" --outtype bf16 --outfile "$model_gguf" \
    >"$work/gguf/convert-model.log" 2>&1 || { tail -20 "$work/gguf/convert-model.log" >&2; die "convert_hf_to_gguf.py failed"; }
fi
checks=()
for ((i = 0; i < n_adapters; i++)); do
  a="$work/adapters/bench-$i" g="$work/gguf/lora-bench-$i-bf16.gguf"
  checks+=("$a" "$g")
  # quiver bench rewrites the adapters (same bytes, new times): convert again only when the
  # source's sha256 is not the one recorded beside the GGUF file.
  sum=$(sha256sum "$a/adapter_model.safetensors" | cut -d' ' -f1)
  [[ ! -f "$g" || "$(cat "$g.source-sha256" 2>/dev/null)" != "$sum" ]] || continue
  echo "converting $a to $g"
  # The converter reads adapter_model.safetensors through the safetensors package, which
  # Debian 12 lacks; it reads adapter_model.bin through torch. The .bin holds the same tensors.
  rm -rf "$work/gguf/adapter-bin/bench-$i"
  "$py" "$helper" bin-adapter "$a" "$work/gguf/adapter-bin/bench-$i" >/dev/null || die "writing adapter_model.bin failed"
  "$py" "$helper" convert "$src/convert_lora_to_gguf.py" "$work/gguf/adapter-bin/bench-$i" --base "$model" \
    --outtype bf16 --outfile "$g" >"$work/gguf/convert-lora-$i.log" 2>&1 ||
    { tail -20 "$work/gguf/convert-lora-$i.log" >&2; die "convert_lora_to_gguf.py failed (bench-$i)"; }
  echo "$sum" >"$g.source-sha256"
done
"$py" "$helper" check "$src" "$model" "$model_gguf" "${checks[@]}" || die "the GGUF files do not hold the checkpoint's values"
# llama.cpp must load and apply the adapter (its loader logs this only at -lv 4).
"$bin/llama-completion" -m "$model_gguf" --lora "$lora_gguf" -t "$threads" -c 64 -no-cnv --temp 0 -n 1 -p "the" -lv 4 \
  </dev/null >/dev/null 2>"$work/gguf/lora-load.log" || { tail -20 "$work/gguf/lora-load.log" >&2; die "llama-completion failed with the adapter"; }
grep -q 'tensors from lora file' "$work/gguf/lora-load.log" || die "llama-completion did not load the adapter (see $work/gguf/lora-load.log)"
[[ "${PREPARE_ONLY:-0}" == 1 ]] && { echo "prepared $work"; exit 0; }

# ---- the rounds ---------------------------------------------------------------------------
run="$work/runs/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$run"
"$py" -c 'import json, sys
k = ["llama_cpp_commit", "threads", "rounds", "pp", "tg", "depth", "mixed_in", "mixed_out", "cpu", "model", "quiver", "only"]
v = sys.argv[1:]; d = dict(zip(k, v)); [d.__setitem__(x, int(d[x])) for x in ("threads", "rounds", "pp", "tg", "depth", "mixed_in", "mixed_out")]
d["only"] = d["only"].split(); print(json.dumps(d, indent=1))' "$LLAMA_CPP_COMMIT" "$threads" "$rounds" "$pp" "$tg" "$depth" \
  "$mixed_in" "$mixed_out" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) ($(nproc) cores)" "$model" "$quiver" "$only" >"$run/meta.json"

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
run_server() {  # KEY ROUND REQUESTS ADAPTERS: llama-server, REQUESTS sent at once over ADAPTERS adapters
  local key=$1 r=$2 n=$3 a=$4 i loras=()
  for ((i = 0; i < a; i++)); do loras+=("$work/gguf/lora-bench-$i-bf16.gguf"); done
  cut -d' ' -f1-3 /proc/loadavg >>"$run/load.txt"
  echo "  $key r$r llama.cpp"
  "$py" "$helper" serve "$bin/llama-server" "$model" "$model_gguf" "$threads" "$n" "$mixed_in" "$mixed_out" "$r" \
    "$run/$key.r$r.llama.json" "$run/$key.r$r.llama.log" "${loras[@]}" >"$run/$key.r$r.llama.err" 2>&1 ||
    { tail -n 20 "$run/$key.r$r.llama.err" "$run/$key.r$r.llama.log" >&2; die "the llama-server run failed ($key)"; }
}
run_quiver() {  # KEY ROUND quiver-bench-args...
  local key=$1 r=$2; shift 2
  cut -d' ' -f1-3 /proc/loadavg >>"$run/load.txt"
  echo "  $key r$r quiver"
  (cd "$root" && "${qbench[@]}" "$@" "${qextra[@]}" --json-output "$run/$key.r$r.quiver.json") \
    >"$run/$key.r$r.quiver.err" 2>&1 || { tail -20 "$run/$key.r$r.quiver.err" >&2; die "quiver bench failed ($key)"; }
}

check_adapters() {  # after a quiver run that rewrote the adapters
  [[ "$(adapter_sums)" == "$adapter_sum" ]] ||
    die "quiver bench rewrote the adapters in $work/adapters with other bytes: the GGUF adapters no longer match"
}
for r in $(seq "$rounds"); do
  echo "round $r of $rounds"
  if want prefill; then
    run_llama prefill "$r" llama-bench -p "$pp" -n 0
    run_quiver prefill "$r" --batch-size 1 --input-len "$pp" --output-len 2 --warmup-steps 0
  fi
  if want decode; then
    run_llama decode "$r" llama-bench -p 0 -n "$tg"
    run_quiver decode "$r" --batch-size 1 --input-len "$tg" --output-len "$tg"
  fi
  if want decode_depth; then
    run_llama decode_depth "$r" llama-bench -p 0 -n "$tg" -d "$depth"
    run_quiver decode_depth "$r" --batch-size 1 --input-len "$depth" --output-len "$tg"
  fi
  if want lora; then
    run_llama lora "$r" llama-completion --lora "$lora_gguf"
    run_quiver lora "$r" --batch-size 1 --input-len "$tg" --output-len "$tg" --num-adapters 1 --adapter-dir "$work/adapters"
    check_adapters
    run_llama lora_base "$r" llama-completion
  fi
  if want mixed4x4; then
    run_server mixed4x4 "$r" 4 4
    run_quiver mixed4x4 "$r" --batch-size 4 --input-len "$mixed_in" --output-len "$mixed_out" --num-adapters 4 --adapter-dir "$work/adapters"
    check_adapters
  fi
  if want mixed16x8; then
    run_server mixed16x8 "$r" 16 8
    run_quiver mixed16x8 "$r" --batch-size 16 --input-len "$mixed_in" --output-len "$mixed_out" --num-adapters 8 --adapter-dir "$work/adapters"
    check_adapters
  fi
done

echo
"$py" "$helper" table "$run" | tee "$run/table.txt"
