#!/usr/bin/env python3
"""Compares `quiver generate` output with a fixture's HF expected.jsonl (same rules as the
C++ e2e test: identical greedy tokens where HF's top-2 margin > 1e-2; reports the largest
|logprob - HF| over generated and prompt positions). Exit 1 on a token mismatch or when the
largest difference exceeds --tol.

  python3 tools/compare_fixtures.py tests/fixtures/llama_gqa out.jsonl [--tol 1e-3]
"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture")
    ap.add_argument("output")
    ap.add_argument("--tol", type=float, default=1e-3)
    a = ap.parse_args()
    req = {}
    for line in open(os.path.join(a.fixture, "requests.jsonl")):
        r = json.loads(line)
        req[r["id"]] = r
    exp = {}
    for line in open(os.path.join(a.fixture, "expected.jsonl")):
        e = json.loads(line)
        exp[e["id"]] = e
    worst, bad, n = 0.0, 0, 0
    for line in open(a.output):
        o = json.loads(line)
        e = exp[o["id"]]
        if "error" in o:
            print("error:", o)
            bad += 1
            continue
        for i, (t, w) in enumerate(zip(o["token_ids"], e["token_ids"])):
            if t != w:
                if e["margins"][i] > 1e-2:
                    print(f"{o['id']}: token {i} is {t}, HF chose {w} (margin {e['margins'][i]:.3g})")
                    bad += 1
                break
            worst = max(worst, abs(o["logprobs"][i][str(t)] - e["logprobs"][i]))
            n += 1
        prompt = req[o["id"]]["prompt_token_ids"]
        for p in range(1, len(prompt)):
            worst = max(worst, abs(o["prompt_logprobs"][p][str(prompt[p])] - e["prompt_logprobs"][p]))
            n += 1
    ok = bad == 0 and worst <= a.tol
    print(f"{os.path.basename(a.fixture.rstrip('/'))}: {len(exp)} requests, {n} positions, "
          f"max |dlogprob| {worst:.3g}, token mismatches {bad}: {'ok' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
