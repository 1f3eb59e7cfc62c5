"""Python LLM.generate throughput against `quiver bench` on the same workload.

Runs `quiver bench` (offline, batch B, random prompts of I tokens, O greedy tokens with
ignore_eos, A synthesized adapters round-robin), keeps its adapters, then times
LLM.generate over the same shapes with the same engine settings in this process. Both
report output tokens per second over the measured passes; the binding adds the Python
side of add_request, the step loop and the output objects. The record (numbers, date,
commit, machine) goes to --json-output.

    make python
    PYTHONPATH=build/python python3 bench/python_generate.py --device cpu
    PYTHONPATH=build/python python3 bench/python_generate.py --device cuda --batch-size 64 --output-len 256
"""

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from quiver import LLM, SamplingParams
from quiver.lora.request import LoRARequest

ROOT = Path(__file__).resolve().parent.parent


def run_quiver_bench(a, adapter_dir: Path, record: Path) -> dict:
    cmd = [a.quiver, "bench", "--model", a.model, "--device", a.device, "--batch-size", str(a.batch_size),
           "--input-len", str(a.input_len), "--output-len", str(a.output_len), "--num-iters", str(a.num_iters),
           "--json-output", str(record)]
    if a.num_adapters:
        cmd += ["--num-adapters", str(a.num_adapters), "--adapter-dir", str(adapter_dir)]
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    return json.loads(record.read_text())


def python_passes(a, opts: dict, adapter_dir: Path, vocab_seed: int) -> list:
    kwargs = dict(device=a.device, max_num_seqs=opts["max_num_seqs"],
                  max_num_batched_tokens=opts["max_num_batched_tokens"], enforce_eager=opts["enforce_eager"])
    if a.num_adapters:
        kwargs.update(enable_lora=True, max_loras=opts["max_loras"], max_lora_rank=opts["max_lora_rank"],
                      max_cpu_loras=max(opts["max_loras"], a.num_adapters), lora_dtype=opts["lora_dtype"])
    llm = LLM(a.model, **kwargs)
    vocab = llm.llm_engine._native.vocab_size
    loras = [LoRARequest(f"bench-{i}", i + 1, str(adapter_dir / f"bench-{i}")) for i in range(a.num_adapters)]
    params = SamplingParams(temperature=0.0, max_tokens=a.output_len, ignore_eos=True)
    rng = random.Random(vocab_seed)

    def batch():
        # Fresh random prompts every pass, so the prefix cache never hits (as quiver bench).
        prompts = [{"prompt_token_ids": [rng.randrange(3, vocab) for _ in range(a.input_len)]}
                   for _ in range(a.batch_size)]
        return prompts, [loras[i % len(loras)] for i in range(a.batch_size)] if loras else None

    prompts, lora = batch()
    warm = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    llm.generate(prompts, warm, lora_request=lora, use_tqdm=False)
    rates = []
    for _ in range(a.num_iters):
        prompts, lora = batch()
        start = time.perf_counter()
        outs = llm.generate(prompts, params, lora_request=lora, use_tqdm=False)
        seconds = time.perf_counter() - start
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        assert tokens == a.batch_size * a.output_len
        rates.append(tokens / seconds)
        print(f"python LLM.generate: {tokens} tokens in {seconds:.3f} s = {tokens / seconds:.1f} tok/s",
              file=sys.stderr)
    return rates


def git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(ROOT / "models/demo/base"))
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--quiver", default=str(ROOT / "build/quiver"), help="the quiver command")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--num-adapters", type=int, default=2)
    p.add_argument("--num-iters", type=int, default=3)
    p.add_argument("--json-output", help="write the record here")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="quiver_pybench_") as tmp:
        tmp = Path(tmp)
        cpp = run_quiver_bench(a, tmp / "adapters", tmp / "bench.json")
        py_rates = python_passes(a, cpp["options"], tmp / "adapters", vocab_seed=12345)
    cpp_rates = [it["end_to_end"]["output_tokens_per_s"] for it in cpp["iterations"]]
    cpp_best, py_best = max(cpp_rates), max(py_rates)
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "machine": {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_1_5_15": list(os.getloadavg())},
        "workload": {k: getattr(a, k) for k in ("device", "batch_size", "input_len", "output_len", "num_adapters",
                                                "num_iters")},
        "quiver_bench_output_tokens_per_s": cpp_rates,
        "python_generate_output_tokens_per_s": py_rates,
        "best_ratio_python_over_cpp": py_best / cpp_best,
        "median_ratio_python_over_cpp": statistics.median(py_rates) / statistics.median(cpp_rates),
    }
    print(f"output tok/s, best of {a.num_iters}: quiver bench {cpp_best:.1f}, python LLM.generate {py_best:.1f} "
          f"(python/C++ x{record['best_ratio_python_over_cpp']:.3f}; medians x{record['median_ratio_python_over_cpp']:.3f})")
    if a.json_output:
        Path(a.json_output).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
