#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizers/llama512: a Llama-2-style tokenizer.json (SentencePiece
BPE with byte fallback, the Prepend/Replace normalizers, <unk> <s> </s> at 0 1 2) of exactly
512 ids, for the tiny llama_vocab test model (vocab_size 512), from the Mistral-7B tokenizer
in tests/fixtures/tokenizers/mistral (stdlib only).

  make_tiny_llama_tokenizer.py [OUT_DIR]

Ids: 0-2 the special tokens, 3-258 the <0xNN> byte pieces, then "▁" and the printable ASCII
characters, then Mistral's merges in rank order whose two parts are already in the
vocabulary, until 512. Text outside it falls back to bytes, as Llama-2's does. The same
input always gives the same file.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "tests/fixtures/tokenizers/mistral")
SP = "\u2581"
SIZE = 512

# Llama-2's [INST] format, for tests that render the base model's chat template.
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
                 "{% else %} {{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}")


def main(out_dir):
    with open(os.path.join(SOURCE, "tokenizer.json"), encoding="utf-8") as f:
        src = json.load(f)
    by_id = {i: t for t, i in src["model"]["vocab"].items()}
    vocab = [by_id[i] for i in range(259)]  # <unk> <s> </s> <0x00>..<0xFF>
    assert vocab[:3] == ["<unk>", "<s>", "</s>"] and vocab[3] == "<0x00>" and vocab[258] == "<0xFF>"
    have = set(vocab)
    for ch in [SP] + [chr(c) for c in range(33, 127)]:
        if ch in src["model"]["vocab"] and ch not in have:
            vocab.append(ch)
            have.add(ch)
    merges = []
    for m in src["model"]["merges"]:
        if len(vocab) == SIZE:
            break
        a, b = m.split(" ") if isinstance(m, str) else m
        if a in have and b in have and a + b not in have:
            vocab.append(a + b)
            have.add(a + b)
            merges.append(f"{a} {b}")
    assert len(vocab) == SIZE, len(vocab)

    tok = dict(src)
    tok["model"] = dict(src["model"], vocab={t: i for i, t in enumerate(vocab)}, merges=merges)
    tok["added_tokens"] = [a for a in src["added_tokens"] if a["id"] < 3]
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "legacy": True, "tokenizer_class": "LlamaTokenizer",
              "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/fixtures/tokenizers/llama512"))
