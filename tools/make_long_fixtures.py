#!/usr/bin/env python3
"""Writes the long-prompt references of the HF fixtures: tests/fixtures/<model>/long_requests.jsonl
and long_expected.jsonl.

Prompts of 64-600 tokens (several KV blocks, and several prefill chunks under the invariance
schedules) over the base model and every adapter of the fixture, so each adapter kind (rsLoRA,
partial targets, rank 1 and 64, rank/alpha patterns, bf16 and f16 storage) sees a prompt
longer than one chunk. The fixture's max_position_embeddings (256) is raised to 1024 in a
linked copy (tools/invariance.py's long_model), and HF + PEFT run greedily on it, float32 on
the CPU with eager attention, as tools/make_fixtures.py does for the short requests. Floats
keep 7 significant digits, top lists 2 entries (the requests ask for 2), so the four
fixtures' files stay near 400 KB together.

Needs torch, transformers >= 5 and peft: run it on the GPU machine (from the repo root)
  python3 tools/make_long_fixtures.py [--models llama_gqa ...]
after any new weights from tools/make_fixtures.py (tools/gpu/run_fixtures.sh runs both).
Deterministic: the prompts come from fixed seeds.
"""
import argparse
import json
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import invariance as inv  # noqa: E402
import make_fixtures as mf  # noqa: E402
from peft import PeftModel  # noqa: E402

TOP = 2
LENGTHS = [64, 97, 130, 255, 333, 600]  # prompt tokens, each twice
MAX_TOKENS = 8


def long_requests(model, config, adapters):
    """Two prompts of each length, the adapters (and the base model) taken in turn."""
    rng = random.Random(len(model))
    choices = [None] + adapters
    vocab = config["vocab_size"]
    return [{"id": f"long{i:02d}", "prompt_token_ids": [rng.randrange(vocab) for _ in range(n)],
             "lora": choices[i % len(choices)], "max_tokens": MAX_TOKENS, "temperature": 0.0,
             "logprobs": TOP, "prompt_logprobs": TOP, "ignore_eos": True}
            for i, n in enumerate(LENGTHS * 2)]


def r7(x):
    return float(f"{x:.7g}")


def trimmed(req, res):
    """run_greedy's result in expected.jsonl's form, top lists cut to TOP, floats rounded."""
    tops = [[[t, r7(v)] for t, v in top[:TOP]] for top in res["top_logprobs"]]
    ptops = [None] + [[[t, r7(v)] for t, v in top[:TOP]] for top in res["prompt_top_logprobs"][1:]]
    return {"id": req["id"], "lora": req["lora"], "prompt_len": len(req["prompt_token_ids"]),
            "token_ids": res["token_ids"], "logprobs": [r7(v) for v in res["logprobs"]], "top_logprobs": tops,
            "margins": [r7(v) for v in res["margins"]],
            "prompt_logprobs": [None] + [r7(v) for v in res["prompt_logprobs"][1:]], "prompt_top_logprobs": ptops}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="*", default=inv.MODELS)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="quiver_long_")
    for model in a.models:
        src = os.path.join(inv.FIXTURES, model)
        long_dir, config = inv.long_model(model, work)
        adapters = sorted(os.listdir(os.path.join(src, "adapters")))
        requests = long_requests(model, config, adapters)
        expected = []
        for lora in [None] + adapters:
            mine = [r for r in requests if r["lora"] == lora]
            if not mine:
                continue
            net = mf.load_model(long_dir)
            if lora is not None:
                net = PeftModel.from_pretrained(net, os.path.join(long_dir, "adapters", lora), is_trainable=False).eval()
            for r in mine:
                expected.append(trimmed(r, mf.run_greedy(net, r["prompt_token_ids"], r["max_tokens"])))
        order = {r["id"]: i for i, r in enumerate(requests)}
        expected.sort(key=lambda e: order[e["id"]])
        for name, rows in (("long_requests.jsonl", requests), ("long_expected.jsonl", expected)):
            with open(os.path.join(src, name), "w") as f:
                for row in rows:
                    f.write(json.dumps(row) + "\n")
        flips = sum(m < mf.MARGIN_MIN for e in expected for m in e["margins"])
        print(f"{model}: {len(requests)} long requests, {flips} generated positions under margin {mf.MARGIN_MIN}")


if __name__ == "__main__":
    main()
