#!/usr/bin/env python3
"""Schedule invariance of `quiver generate` on one device: the same tokens under every schedule.

Every HF fixture (tests/fixtures/<model>) runs under each schedule below, with CUDA graphs
and eagerly (one mode on the CPU, which has no graphs), and every run is checked twice:
  - against HF (tools/compare_fixtures.py's rules): |dlogprob| <= 1e-3 for float32 compute,
    the stated bound (docs/numerics.md, 0.25) for 16-bit numerics (16-bit models on CUDA,
    bf16 models on the CPU, bf16 slot stacks anywhere);
  - against the greedy tokens of the CPU in float32 compute (--matmul-precision highest),
    which may part only where HF's top-2 margin is below 1e-2 (float32 compute) or below
    the bound (16-bit numerics).
Long prompts (64-600 tokens: several KV blocks and chunks, over the base model and every
adapter) run on a copy of each fixture whose max_position_embeddings is raised, and are
checked the same two ways against their own HF references (long_requests.jsonl and
long_expected.jsonl, written by tools/make_long_fixtures.py).

Schedules: plain; prefill chunks of 1/3/8/16/64 tokens (--max-num-batched-tokens);
max-num-seqs 1 (each request alone) and 2; preemption (a KV cache of few blocks); block
size 1 and 4 (16 is plain); prefix caching off; max-loras 1 (slot reuse between steps
and replays); n = 2 (each completion checked); bf16 slot stacks (held to the 16-bit bound);
an fp8 e4m3 KV cache (held to its own bound, FP8_BOUND; on CUDA only where head_dim is a
multiple of 16, which its kernels need); fp8 e4m3 projection weights (--quantization fp8,
held to FP8_WEIGHT_BOUND against HF on the original weights, and checked for greedy tokens
against the CPU on the same quantized weights in float32 compute, whose logprobs they must
stay within FP8_BOUND of: CUDA multiplies x in bf16 at 3-16 tokens and quantizes it to e4m3
per token above).

  python3 tools/invariance.py --quiver build/quiver --device cuda [--models llama_gqa ...]

Prints one line per run and a summary; exit 1 on any failure.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_fixtures as cf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
MODELS = ["llama_gqa", "llama3_bf16", "qwen2_tied", "mistral", "llama_vocab", "qwen2_vocab"]
BOUND = 0.25  # docs/numerics.md: 16-bit numerics against HF float32
FP8_BOUND = 3.0  # docs/numerics.md: the fp8 e4m3 KV cache against HF float32
FP8_WEIGHT_BOUND = 8.0  # docs/numerics.md: fp8 e4m3 weights against HF on the original weights
LONG_POSITIONS = 1024
LONG_SCHEDULES = ("plain", "chunk16", "chunk64", "seqs1", "preempt", "block4", "loras1", "lorabf16", "fp8kv", "fp8w",
                  "tp2")

# (name, extra flags, request rewrite or None). The preemption schedule's cache holds a
# little over one longest request: 14 blocks of 16 for up to 100 + 12 tokens (max-model-len
# 128, so the engine accepts a cache that small).
SCHEDULES = [
    ("plain", [], None),
    ("chunk1", ["--max-num-batched-tokens", "1"], None),
    ("chunk3", ["--max-num-batched-tokens", "3"], None),
    ("chunk8", ["--max-num-batched-tokens", "8"], None),
    ("chunk16", ["--max-num-batched-tokens", "16"], None),
    ("chunk64", ["--max-num-batched-tokens", "64"], None),
    ("seqs1", ["--max-num-seqs", "1"], None),
    ("seqs2", ["--max-num-seqs", "2"], None),
    ("preempt", ["--num-kv-blocks", "14", "--max-num-batched-tokens", "32", "--max-model-len", "128"], None),
    ("block1", ["--block-size", "1"], None),
    ("block4", ["--block-size", "4"], None),
    ("noprefix", ["--no-prefix-caching"], None),
    ("loras1", ["--max-loras", "1"], None),
    ("n2", [], {"n": 2}),
    # Slot stacks in bf16 (vLLM's lora_dtype auto for bf16 models): the adapters' weights are
    # rounded, so these runs are held to the 16-bit bound on every model.
    ("lorabf16", ["--lora-dtype", "bfloat16"], None),
    ("fp8kv", ["--kv-cache-dtype", "fp8"], None),
    ("fp8w", ["--quantization", "fp8"], None),
    # Two tensor-parallel ranks (docs/tensor_parallel.md): threads of one process on the CPU,
    # two GPUs over NCCL on CUDA (not run where there is one); held to the plain bounds.
    ("tp2", ["--tensor-parallel-size", "2"], None),
]
ROUNDED = ("lorabf16",)  # schedules whose numerics are 16-bit on every model and device
FP8 = ("fp8kv",)  # schedules held to FP8_BOUND
FP8_WEIGHTS = ("fp8w",)  # held to FP8_WEIGHT_BOUND, tokens against the CPU on the same weights


def read_jsonl(path):
    return cf.read_jsonl(path)


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def storage_dtype(model_dir):
    with open(os.path.join(model_dir, "manifest.json")) as f:
        return json.load(f)["storage_dtype"]


def completions(line):
    """The completions of one output line: one, or each of `outputs` when n > 1."""
    if "outputs" in line:
        return [dict(c, id=line["id"], prompt_logprobs=line.get("prompt_logprobs")) for c in line["outputs"]]
    return [line]


class Runner:
    def __init__(self, quiver, work, timeout):
        self.quiver, self.work, self.timeout = quiver, work, timeout

    def generate(self, model_dir, requests_path, tag, flags):
        """Runs quiver generate with every adapter of model_dir; returns (lines, error)."""
        out = os.path.join(self.work, tag + ".jsonl")
        cmd = [self.quiver, "generate", "--model", model_dir, "--max-lora-rank", "64"]
        if "--max-loras" not in flags:
            cmd += ["--max-loras", "8"]
        for a in sorted(os.listdir(os.path.join(model_dir, "adapters"))):
            cmd += ["--lora", f"{a}={os.path.join(model_dir, 'adapters', a)}"]
        cmd += vocab_flags(model_dir) + flags + ["--input", requests_path, "--output", out]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {self.timeout} s"
        if r.returncode != 0:
            return None, f"exit {r.returncode}: {r.stderr.strip()[-400:]}"
        return read_jsonl(out), None


def vocab_flags(model_dir):
    """Slot rows for the vocabulary adapters of a fixture (tools/make_vocab_fixtures.py):
    a modules_to_save adapter sets every row of its resized vocabulary."""
    path = os.path.join(model_dir, "manifest.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        manifest = json.load(f)
    if not any(a.get("layout") == "modules_to_save" for a in manifest["adapters"]):
        return []
    with open(os.path.join(model_dir, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    return ["--max-lora-vocab-rows", str(vocab + max(a.get("new_tokens", 0) for a in manifest["adapters"]))]


def check_hf(fixture, lines, bound):
    """HF rules on every completion, bound None (float32: 1e-3) or the stated bound;
    returns (problems, positions, max |dlogprob|)."""
    bound_mode = bound is not None
    req, exp = fixture["requests"], fixture["expected"]
    problems, diffs = [], []
    seen = set()
    for line in lines:
        if "error" in line:
            problems.append(f"{line['id']}: error line: {line['error']}")
            continue
        seen.add(line["id"])
        for c in completions(line):
            limit = bound if bound_mode else 1e-3
            p, d, _ = cf.compare_to_hf(req[c["id"]], exp[c["id"]], c, limit if bound_mode else 1e-2, limit,
                                       bound_mode, [])
            problems += p
            diffs += d
    problems += [f"{rid}: no output line" for rid in sorted(set(req) - seen)]
    worst = max(diffs, default=0.0)
    if not bound_mode and worst > 1e-3:
        problems.append(f"max |dlogprob| {worst:.3g} > tol 1e-3")
    return problems, len(diffs), worst


def check_against(lines, reference, margins_of, margin, lp_bound=None):
    """Greedy tokens against a reference run; margins_of(id) -> per-position margins. With
    lp_bound: the chosen tokens' logprobs too, up to the first difference (problems past it);
    returns (problems, the largest such |dlogprob|)."""
    ref = {r["id"]: r for r in reference}
    problems = []
    worst = 0.0
    for line in lines:
        if "error" in line:
            problems.append(f"{line['id']}: error line: {line['error']}")
            continue
        base = ref.get(line["id"])
        if base is None or "error" in base:
            problems.append(f"{line['id']}: missing or failed in the reference run")
            continue
        m = margins_of(line["id"])
        for c in completions(line):
            for i, (x, y) in enumerate(zip(c["token_ids"], base["token_ids"])):
                if x != y:
                    if m[i] >= margin:
                        problems.append(f"{c['id']}: token {i}: {x} here, {y} on the CPU (margin {m[i]:.3g})")
                    break
                if lp_bound is not None:
                    d = abs(cf.logprob_of(c["logprobs"][i], x) - cf.logprob_of(base["logprobs"][i], y))
                    worst = max(worst, d)
                    if d > lp_bound:
                        problems.append(f"{c['id']}: token {i}: |dlogprob| {d:.3g} against the CPU > {lp_bound}")
            if len(c["token_ids"]) != len(base["token_ids"]):
                problems.append(f"{c['id']}: {len(c['token_ids'])} tokens here, {len(base['token_ids'])} on the CPU")
    return (problems, worst) if lp_bound is not None else problems


def long_model(model, work):
    """A copy of fixture `model` (links to its weights and adapters) whose config allows
    prompts of up to LONG_POSITIONS tokens. Returns (folder, config)."""
    src = os.path.join(FIXTURES, model)
    dst = os.path.join(work, model + "_long")
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if name in ("config.json", "requests.jsonl", "expected.jsonl") or name.startswith("long_"):
            continue
        link = os.path.join(dst, name)
        if not os.path.lexists(link):
            os.symlink(os.path.join(src, name), link)
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["max_position_embeddings"] = LONG_POSITIONS
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f)
    return dst, config


def read_fixture(fx, prefix=""):
    """A fixture's requests and HF results by id (prefix "long_": its long-prompt ones)."""
    return {"requests": {r["id"]: r for r in read_jsonl(os.path.join(fx, prefix + "requests.jsonl"))},
            "expected": {e["id"]: e for e in read_jsonl(os.path.join(fx, prefix + "expected.jsonl"))}}


def modes_for(device):
    return [("graph", []), ("eager", ["--enforce-eager"])] if device == "cuda" else [("eager", [])]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quiver", default=os.path.join(ROOT, "build", "quiver"))
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "ref"])
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--schedules", nargs="*", help="only these schedules (default: all)")
    ap.add_argument("--no-long", action="store_true", help="skip the long-prompt fixtures")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per quiver run")
    ap.add_argument("--jobs", type=int, default=max(1, min(4, (os.cpu_count() or 2) // 2)),
                    help="quiver runs at a time (default: half the cores, at most 4)")
    ap.add_argument("--keep", help="keep outputs in this folder (default: a temporary one)")
    a = ap.parse_args()
    schedules = [s for s in SCHEDULES if not a.schedules or s[0] in a.schedules]
    work = a.keep or tempfile.mkdtemp(prefix="quiver_invariance_")
    os.makedirs(work, exist_ok=True)
    runner = Runner(a.quiver, work, a.timeout)
    t0 = time.time()
    runs = failed = 0

    def report(tag, problems, extra=""):
        nonlocal runs, failed
        runs += 1
        failed += bool(problems)
        print(f"{tag}: {'FAIL' if problems else 'ok'}{extra}")
        for p in problems[:8]:
            print("    " + p)
        if len(problems) > 8:
            print(f"    ... {len(problems) - 8} more")
        sys.stdout.flush()

    if a.device == "cuda":  # exit 77 (ctest's skip) where this build or machine has no GPU
        fx = os.path.join(FIXTURES, a.models[0])
        probe = os.path.join(work, "probe.jsonl")
        write_jsonl(probe, read_jsonl(os.path.join(fx, "requests.jsonl"))[:1])
        _, err = runner.generate(fx, probe, "probe", ["--device", "cuda"])
        if err and ("no CUDA device" in err or "without CUDA" in err):
            print(f"invariance: skipped, no GPU ({err.splitlines()[0][:200]})")
            sys.exit(77)
        if any(s[0] == "tp2" for s in schedules):
            _, err = runner.generate(fx, probe, "probe_tp2", ["--device", "cuda", "--tensor-parallel-size", "2"])
            if err:
                print(f"tp2: not run ({err.splitlines()[0][:200]})")
                schedules = [s for s in schedules if s[0] != "tp2"]
    # Per model: the CPU reference runs, then every device run; runs go `--jobs` at a time
    # (separate processes), checks are reported in order.
    refs, runs_todo, fixtures = {}, [], {}
    for model in a.models:
        fx = os.path.join(FIXTURES, model)
        # The models whose default numerics are 16-bit on this device (docs/numerics.md).
        sixteen = storage_dtype(fx) != "float32" if a.device == "cuda" else storage_dtype(fx) == "bfloat16"
        fixtures[(model, "short")] = dict(read_fixture(fx), sixteen=sixteen)
        refs[(model, "short")] = (fx, os.path.join(fx, "requests.jsonl"))
        if not a.no_long and os.path.exists(os.path.join(fx, "long_requests.jsonl")):
            fixtures[(model, "long")] = dict(read_fixture(fx, "long_"), sixteen=sixteen)
            refs[(model, "long")] = (long_model(model, work)[0], os.path.join(fx, "long_requests.jsonl"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        highest = ["--device", "cpu", "--matmul-precision", "highest"]
        ref_out = {key: pool.submit(runner.generate, d, p, f"{key[0]}_{key[1]}_cpu", highest) for key, (d, p) in refs.items()}
        if any(s[0] in FP8_WEIGHTS for s in schedules):
            ref_out.update({key + ("fp8w",): pool.submit(runner.generate, d, p, f"{key[0]}_{key[1]}_cpu_fp8w",
                                                         highest + ["--quantization", "fp8"])
                            for key, (d, p) in refs.items()})
        ref_out = {key: f.result() for key, f in ref_out.items()}
        for model in a.models:
            fx = os.path.join(FIXTURES, model)
            requests = list(fixtures[(model, "short")]["requests"].values())
            with open(os.path.join(fx, "config.json")) as f:
                cfg = json.load(f)
            head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
            for name, flags, rewrite in schedules:
                if name in FP8 and a.device == "cuda" and head_dim % 16:
                    print(f"{model} {name}: not run (CUDA's fp8 cache needs head_dim % 16 == 0, this has {head_dim})")
                    continue
                path = os.path.join(fx, "requests.jsonl")
                if rewrite:
                    path = os.path.join(work, f"{model}_{name}_requests.jsonl")
                    write_jsonl(path, [dict(r, **rewrite) for r in requests])
                for mode, mode_flags in modes_for(a.device):
                    runs_todo.append((model, "short", name, mode, fx, path, ["--device", a.device] + mode_flags + flags))
            if (model, "long") not in refs:
                continue
            long_dir, long_path = refs[(model, "long")]
            for name, flags, _ in schedules:
                if name not in LONG_SCHEDULES or (name in FP8 and a.device == "cuda" and head_dim % 16):
                    continue
                if name == "preempt":  # a little over one 600 + 8 token request: 39 blocks of 16
                    flags = ["--num-kv-blocks", "40", "--max-num-batched-tokens", "64", "--max-model-len", "640"]
                for mode, mode_flags in modes_for(a.device):
                    runs_todo.append((model, "long", name, mode, long_dir, long_path,
                                      ["--device", a.device] + mode_flags + flags))
        futures = [pool.submit(runner.generate, d, p, f"{m}_{k}_{n}_{mo}", fl) for m, k, n, mo, d, p, fl in runs_todo]
        for (model, kind, name, mode, _, _, _), fut in zip(runs_todo, futures):
            tag = f"{model} {'long ' if kind == 'long' else ''}{name} {mode}"
            cpu, err = ref_out[(model, kind) + (("fp8w",) if name in FP8_WEIGHTS else ())]
            if err:
                report(tag, [f"cpu reference: {err}"])
                continue
            lines, err = fut.result()
            if err:
                report(tag, [err])
                continue
            fixture = fixtures[(model, kind)]
            # 16-bit GEMM inputs (and on CUDA KV cache) for 16-bit models; bf16 stacks anywhere.
            bound = (FP8_BOUND if name in FP8 else FP8_WEIGHT_BOUND if name in FP8_WEIGHTS
                     else BOUND if fixture["sixteen"] or name in ROUNDED else None)
            margin = bound if bound is not None else 1e-2
            problems, positions, worst = check_hf(fixture, lines, bound)
            exp = fixture["expected"]
            extra = ""
            if name in FP8_WEIGHTS:  # against the same quantized weights with f32 activations
                p, worst_cpu = check_against(lines, cpu, lambda rid: exp[rid]["margins"], margin, FP8_BOUND)
                problems += p
                extra = f", against the CPU's exact fp8 run {worst_cpu:.3g}"
            else:
                problems += check_against(lines, cpu, lambda rid: exp[rid]["margins"], margin)
            report(tag, problems, f" ({positions} positions vs HF, max |dlogprob| {worst:.3g}{extra})")
    print(f"invariance ({a.device}): {runs - failed} passed, {failed} failed, {time.time() - t0:.0f} s")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
