#!/usr/bin/env python3
"""Reference outputs of Hugging Face `tokenizers` for quiver's tokenizer tests, plus a
single-thread encode benchmark to compare with bench/bench_tokenizer.cc.

Runs offline (e.g. on the GPU machine: python3 with tokenizers and transformers):
    python3 tools/make_tokenizer_fixtures.py [--out DIR] [TOKENIZER_ROOT ...]
Each TOKENIZER_ROOT holds one folder per tokenizer (tokenizer.json [+ tokenizer_config.json]);
default: tests/fixtures/tokenizers and tests/tokenizer_data/npm (see tools/fetch_tokenizers.sh).
Writes tests/fixtures/tokenizer_expected/<name>.jsonl (or DIR/<name>.jsonl): for each line of
tests/fixtures/tokenizer_corpus.jsonl, {"text", "ids" (add_special_tokens=True),
"ids_no_special" (False), "decoded" (decode(ids), skip_special_tokens=False),
"decoded_skip_special" (True)}.

The reference is tokenizers' Tokenizer.from_file, i.e. tokenizer.json semantics. For
information it also reports how often transformers' AutoTokenizer disagrees (transformers
reads tokenizer_config.json too, e.g. add_bos_token).
"""
import json
import os
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
import tokenizers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "fixtures", "tokenizer_corpus.jsonl")
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "tokenizer_expected")
BENCH_TOKENIZER = "llama3"
BENCH_BYTES = 1 << 20


def bench_lines(texts):
    """The benchmark input: corpus lines repeated in order until >= 1 MiB (same as the C++ bench)."""
    lines, total = [], 0
    while total < BENCH_BYTES:
        for t in texts:
            if not t:
                continue
            lines.append(t)
            total += len(t.encode("utf-8"))
            if total >= BENCH_BYTES:
                break
    return lines, total


def transformers_mismatches(folder, texts, expected):
    try:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(folder)
    except Exception as e:  # informational only
        return "transformers could not load it: %s" % (str(e).splitlines()[0] if str(e) else type(e).__name__)
    bad = 0
    for t, ids in zip(texts, expected):
        if tok(t, add_special_tokens=True)["input_ids"] != ids:
            bad += 1
    return "%d of %d lines differ from transformers.AutoTokenizer (%s)" % (bad, len(texts), type(tok).__name__)


def main():
    global OUT_DIR
    args = sys.argv[1:]
    if args[:1] == ["--out"]:
        OUT_DIR = os.path.abspath(args[1])
        args = args[2:]
    roots = args or [os.path.join(ROOT, "tests", "fixtures", "tokenizers"),
                             os.path.join(ROOT, "tests", "tokenizer_data", "npm")]
    with open(CORPUS, encoding="utf-8") as f:
        texts = [json.loads(l)["text"] for l in f if l.strip()]
    os.makedirs(OUT_DIR, exist_ok=True)
    print("tokenizers %s" % tokenizers.__version__)
    found = {}
    for root in roots:
        if not os.path.isdir(root):
            print("skipping %s (absent)" % root)
            continue
        for name in sorted(os.listdir(root)):
            folder = os.path.join(root, name)
            if os.path.isfile(os.path.join(folder, "tokenizer.json")):
                found[name] = folder
    for name, folder in sorted(found.items()):
        tok = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        out_path = os.path.join(OUT_DIR, name + ".jsonl")
        expected = []
        with open(out_path, "w", encoding="utf-8") as out:
            for t in texts:
                ids = tok.encode(t, add_special_tokens=True).ids
                row = {"text": t, "ids": ids,
                       "ids_no_special": tok.encode(t, add_special_tokens=False).ids,
                       "decoded": tok.decode(ids, skip_special_tokens=False),
                       "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)}
                expected.append(ids)
                out.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
        print("%-18s -> %s; %s" % (name, os.path.relpath(out_path, ROOT),
                                    transformers_mismatches(folder, texts, expected)))

    if BENCH_TOKENIZER in found:
        tok = tokenizers.Tokenizer.from_file(os.path.join(found[BENCH_TOKENIZER], "tokenizer.json"))
        lines, total = bench_lines(texts)
        for t in lines:  # warm-up (fills the BPE cache, as the C++ bench's warm-up does)
            tok.encode(t, add_special_tokens=False)
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for t in lines:
                tok.encode(t, add_special_tokens=False)
            best = min(best, time.perf_counter() - start)
        print("HF tokenizers encode, %s, 1 thread: %d lines, %.2f MB in %.3f s = %.2f MB/s"
              % (BENCH_TOKENIZER, len(lines), total / 1e6, best, total / 1e6 / best))
    else:
        print("no %s tokenizer: benchmark skipped (run tools/fetch_tokenizers.sh)" % BENCH_TOKENIZER)


if __name__ == "__main__":
    main()
