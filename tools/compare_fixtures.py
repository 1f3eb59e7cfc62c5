#!/usr/bin/env python3
"""Compares `quiver generate` output with a fixture's HF expected.jsonl. Three rules:

  --tol T (default 1e-3): the float32 rule (DESIGN.md section 4, as the C++ e2e test):
      identical greedy tokens wherever HF's top-2 margin > 1e-2 (at a smaller margin the
      request is compared up to there), and the largest |logprob - HF| over compared
      generated and prompt positions <= T.
  --bound B: the bf16 rule (docs/numerics.md): |logprob - HF| <= B at every compared
      generated and prompt position, and a greedy token may differ from HF's only at a step
      whose HF top-2 margin is < B; the request is compared up to and including that step
      (where quiver's token is one of HF's top-5, its logprob must be within B of HF's too).
  --against OTHER: two quiver runs of the same requests (e.g. --device cpu and cuda): the
      same greedy tokens, except that they may part at a step whose HF top-2 margin is
      < --margin (default 1e-2); a request is compared until either run leaves HF's tokens.
      Reports the largest |logprob difference| between the runs (information, not a check).

Exit 1 on any violation or error line. Examples:
  python3 tools/compare_fixtures.py tests/fixtures/llama_gqa out.jsonl --tol 1e-3
  python3 tools/compare_fixtures.py tests/fixtures/llama3_bf16 out.jsonl --bound 0.15
  python3 tools/compare_fixtures.py tests/fixtures/llama3_bf16 cuda.jsonl --against cpu.jsonl --margin 0.15
"""
import argparse
import json
import os
import sys


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def logprob_of(entry, token):
    """quiver's logprob dict for one position -> logprob of `token` (None when absent)."""
    v = entry.get(str(token)) if entry else None
    return None if v is None else float(v)


def percentile(values, q):
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def compare_to_hf(req, exp, out, token_margin, lp_tol, bound_mode, margin_diffs):
    """Returns (problems, diffs, flips) for one request: problem strings, every |dlogprob|,
    and the (step, margin) of an allowed greedy divergence. In bound mode every top-k entry
    quiver and HF share is held to the bound too, and |quiver margin - HF margin| is
    appended to margin_diffs where both have the same top-2 tokens."""
    problems, diffs, flips = [], [], []
    rid = out["id"]

    def check(d, where):
        diffs.append(d)
        if bound_mode and d > lp_tol:
            problems.append(f"{rid}: {where}: |dlogprob| {d:.3g} > bound {lp_tol:g}")

    for i, (t, w) in enumerate(zip(out["token_ids"], exp["token_ids"])):
        if t != w:
            margin = exp["margins"][i]
            if margin >= token_margin:
                problems.append(f"{rid}: token {i} is {t}, HF chose {w} (HF top-2 margin {margin:.3g})")
            else:
                flips.append((rid, i, margin))
                hf_lp = {tok: lp for tok, lp in exp["top_logprobs"][i]}
                mine = logprob_of(out["logprobs"][i], t)
                if bound_mode and t in hf_lp and mine is not None:
                    check(abs(mine - hf_lp[t]), f"token {i} (diverged)")
            break
        check(abs(logprob_of(out["logprobs"][i], t) - exp["logprobs"][i]), f"token {i}")
        if bound_mode:
            check_top(out["logprobs"][i], exp["top_logprobs"][i], lambda d, k: check(d, f"token {i}, top-k id {k}"))
            mine = sorted(((float(v), int(k)) for k, v in out["logprobs"][i].items()), reverse=True)
            hf = exp["top_logprobs"][i]
            if len(mine) >= 2 and mine[1][1] == hf[1][0]:  # same runner-up: the margins are comparable
                margin_diffs.append(abs(mine[0][0] - mine[1][0] - exp["margins"][i]))
    # The streamed text of an output HF produced token for token (detokenized by the
    # request's tokenizer: an adapter's, for its new tokens).
    if "text" in exp and out["token_ids"] == exp["token_ids"] and out.get("text") != exp["text"]:
        problems.append(f"{rid}: text {out.get('text')!r}, HF's {exp['text']!r}")
    # A text prompt: HF's encoding is in the expected line; the prompt logprobs quiver reports
    # are keyed by its own encoding's ids, so a different encoding shows as a missing id.
    prompt = req.get("prompt_token_ids") or exp["prompt_token_ids"]
    if len(out["prompt_logprobs"]) != len(prompt):
        return problems + [f"{rid}: {len(out['prompt_logprobs'])} prompt positions, HF encoded {len(prompt)}"], diffs, flips
    for p in range(1, len(prompt)):
        mine = logprob_of(out["prompt_logprobs"][p], prompt[p])
        if mine is None:
            problems.append(f"{rid}: prompt {p}: HF's token {prompt[p]} is not this run's prompt token")
            continue
        check(abs(mine - exp["prompt_logprobs"][p]), f"prompt {p}")
        if bound_mode:
            check_top(out["prompt_logprobs"][p], exp["prompt_top_logprobs"][p],
                      lambda d, k: check(d, f"prompt {p}, top-k id {k}"))
    return problems, diffs, flips


def check_top(entry, hf_top, check):
    """Calls check(|dlogprob|, id) for every id in both quiver's top-k and HF's top list."""
    hf = {tok: lp for tok, lp in hf_top}
    for k, v in entry.items():
        if int(k) in hf:
            check(abs(float(v) - hf[int(k)]), k)


def compare_runs(exp, a, b, margin):
    """Two quiver outputs of one request. Returns (problems, diffs, flips)."""
    problems, diffs, flips = [], [], []
    for i, (x, y, w) in enumerate(zip(a["token_ids"], b["token_ids"], exp["token_ids"])):
        if x != y:
            if exp["margins"][i] >= margin:
                problems.append(f"{a['id']}: token {i}: {x} here, {y} in the other run "
                                f"(HF chose {w}, top-2 margin {exp['margins'][i]:.3g})")
            else:
                flips.append((a["id"], i, exp["margins"][i]))
            break
        lx, ly = logprob_of(a["logprobs"][i], x), logprob_of(b["logprobs"][i], y)
        if lx is not None and ly is not None:
            diffs.append(abs(lx - ly))
        if x != w:  # both left HF's sequence: HF's margins no longer describe what follows
            break
    return problems, diffs, flips


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fixture")
    ap.add_argument("output")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--tol", type=float, default=1e-3, help="float32 rule: max |dlogprob| (default 1e-3)")
    mode.add_argument("--bound", type=float, help="bf16 rule: the stated bound B (docs/numerics.md)")
    mode.add_argument("--against", help="another quiver output of the same requests")
    ap.add_argument("--margin", type=float, default=1e-2, help="with --against: HF top-2 margin below which runs may part")
    a = ap.parse_args()
    name = os.path.basename(a.fixture.rstrip("/"))
    req = {r["id"]: r for r in read_jsonl(os.path.join(a.fixture, "requests.jsonl"))}
    exp = {e["id"]: e for e in read_jsonl(os.path.join(a.fixture, "expected.jsonl"))}
    lines = read_jsonl(a.output)
    problems, diffs, flips, margin_diffs = [], [], [], []
    problems += [f"{o['id']}: error line: {o['error']}" for o in lines if "error" in o]
    problems += [f"{o['id']}: not a request of the fixture" for o in lines if o["id"] not in exp]
    problems += [f"{rid}: no output line" for rid in sorted(set(exp) - {o["id"] for o in lines})]
    outs = [o for o in lines if "error" not in o and o["id"] in exp]

    if a.against:
        other = {o["id"]: o for o in read_jsonl(a.against)}
        for o in outs:
            if o["id"] not in other or "error" in other[o["id"]]:
                problems.append(f"{o['id']}: missing or failed in {a.against}")
                continue
            p, d, f = compare_runs(exp[o["id"]], o, other[o["id"]], a.margin)
            problems += p
            diffs += d
            flips += f
        rule = f"same greedy tokens as {os.path.basename(a.against)} where HF margin >= {a.margin:g}"
    else:
        bound_mode = a.bound is not None
        limit = a.bound if bound_mode else a.tol
        for o in outs:
            p, d, f = compare_to_hf(req[o["id"]], exp[o["id"]], o, limit if bound_mode else 1e-2, limit, bound_mode,
                                    margin_diffs)
            problems += p
            diffs += d
            flips += f
        worst = max(diffs, default=0.0)
        if not bound_mode and worst > a.tol:
            problems.append(f"max |dlogprob| {worst:.3g} > tol {a.tol:g}")
        rule = f"bound {a.bound:g}" if bound_mode else f"tol {a.tol:g}"
        if bound_mode:
            rule = f"max |dmargin| {max(margin_diffs, default=0.0):.3g}, " + rule

    for p in problems:
        print("  " + p)
    for rid, i, m in flips:
        print(f"  {rid}: greedy token {i} differs at HF top-2 margin {m:.3g} (allowed; compared up to there)")
    ok = not problems
    print(f"{name}: {len(outs)} requests, {len(diffs)} positions, max |dlogprob| {max(diffs, default=0.0):.3g} "
          f"(p99 {percentile(diffs, 0.99):.3g}, mean {sum(diffs) / max(len(diffs), 1):.3g}), "
          f"allowed divergences {len(flips)}, {rule}: {'ok' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
