"""Python LLM.generate throughput against `quiver bench` on the same workload.

Alternates passes of `quiver bench` (offline, batch B, random prompts of I tokens, O
greedy tokens with ignore_eos, A synthesized adapters round-robin; one measured pass per
run) and of LLM.generate over the same shapes with the same engine settings, in the order
A B B A ..., so load that changes on a shared machine hits both sides alike; the median of
the per-pair ratios is the result. quiver bench counts output tokens over the time of its
steps; the Python side counts the wall time of generate(), which adds add_request, the
step loop and the output objects. Within each Python pass it also reports the share of
generate()'s wall time spent outside the engine's step() (EngineCounters.step_seconds):
the binding's own cost, which load on the machine moves far less. The record (numbers,
date, commit, machine) goes to --json-output.

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
           "--input-len", str(a.input_len), "--output-len", str(a.output_len), "--num-iters", "1",
           "--json-output", str(record)]
    if a.num_adapters:
        cmd += ["--num-adapters", str(a.num_adapters), "--adapter-dir", str(adapter_dir)]
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    return json.loads(record.read_text())


def python_runner(a, opts: dict, adapter_dir: Path, vocab_seed: int):
    """An engine with quiver bench's settings, and a function that times one generate() pass."""
    kwargs = dict(device=a.device, max_num_seqs=opts["max_num_seqs"],
                  max_num_batched_tokens=opts["max_num_batched_tokens"], enforce_eager=opts["enforce_eager"])
    if a.num_adapters:
        kwargs.update(enable_lora=True, max_loras=opts["max_loras"], max_lora_rank=opts["max_lora_rank"],
                      max_cpu_loras=max(opts["max_loras"], a.num_adapters), lora_dtype=opts["lora_dtype"])
    llm = LLM(a.model, **kwargs)
    vocab = llm.get_tokenizer().vocab_size
    loras = [LoRARequest(f"bench-{i}", i + 1, str(adapter_dir / f"bench-{i}")) for i in range(a.num_adapters)]
    params = SamplingParams(temperature=0.0, max_tokens=a.output_len, ignore_eos=True)
    rng = random.Random(vocab_seed)

    def batch():
        # Fresh random prompts every pass, so the prefix cache never hits (as quiver bench).
        prompts = [{"prompt_token_ids": [rng.randrange(3, vocab) for _ in range(a.input_len)]}
                   for _ in range(a.batch_size)]
        return prompts, [loras[i % len(loras)] for i in range(a.batch_size)] if loras else None

    prompts, lora = batch()
    llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True), lora_request=lora,
                 use_tqdm=False)

    def one_pass():
        """Output tok/s over the wall time of generate(), the share of that time spent outside
        the engine's step(), and that time per step in microseconds."""
        prompts, lora = batch()
        before = llm.llm_engine.get_counters()
        start = time.perf_counter()
        outs = llm.generate(prompts, params, lora_request=lora, use_tqdm=False)
        seconds = time.perf_counter() - start
        after = llm.llm_engine.get_counters()
        inside = after.step_seconds - before.step_seconds
        steps = after.steps - before.steps
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        assert tokens == a.batch_size * a.output_len
        outside = 1 - inside / seconds
        print(f"python LLM.generate: {tokens} tokens in {seconds:.3f} s = {tokens / seconds:.1f} tok/s; outside "
              f"the engine's {steps} steps: {100 * outside:.2f}% of it, {1e6 * (seconds - inside) / steps:.1f} us/step",
              file=sys.stderr)
        return tokens / seconds, outside, 1e6 * (seconds - inside) / steps

    return one_pass


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
    p.add_argument("--num-iters", type=int, default=6, help="pairs of passes")
    p.add_argument("--json-output", help="write the record here")
    a = p.parse_args()
    cpp_rates = []
    with tempfile.TemporaryDirectory(prefix="quiver_pybench_") as tmp:
        tmp = Path(tmp)

        def cpp_pass() -> dict:
            rec = run_quiver_bench(a, tmp / "adapters", tmp / "bench.json")
            cpp_rates.append(rec["iterations"][0]["end_to_end"]["output_tokens_per_s"])
            return rec

        options = cpp_pass()["options"]  # also writes the adapters the Python side loads
        python_pass = python_runner(a, options, tmp / "adapters", vocab_seed=12345)
        py_passes = [python_pass()]
        for i in range(1, a.num_iters):
            if i % 2:
                py_passes.append(python_pass())
                cpp_pass()
            else:
                cpp_pass()
                py_passes.append(python_pass())
    py_rates = [p[0] for p in py_passes]
    outside = [p[1] for p in py_passes]
    ratios = [p / c for p, c in zip(py_rates, cpp_rates)]
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "machine": {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_1_5_15": list(os.getloadavg())},
        "workload": {k: getattr(a, k) for k in ("device", "batch_size", "input_len", "output_len", "num_adapters",
                                                "num_iters")},
        "quiver_bench_output_tokens_per_s": cpp_rates,
        "python_generate_output_tokens_per_s": py_rates,
        "ratio_python_over_cpp_per_pair": ratios,
        "median_ratio_python_over_cpp": statistics.median(ratios),
        "ratio_of_best": max(py_rates) / max(cpp_rates),
        # Measured inside each Python pass, so load on the machine cancels out.
        "python_share_outside_steps_per_pass": outside,
        "median_python_share_outside_steps": statistics.median(outside),
        "python_us_outside_steps_per_step": [p[2] for p in py_passes],
    }
    print(f"output tok/s over {a.num_iters} pairs: quiver bench best {max(cpp_rates):.1f}, python LLM.generate best "
          f"{max(py_rates):.1f}; python/C++ median of pair ratios x{record['median_ratio_python_over_cpp']:.3f} "
          f"(ratio of bests x{record['ratio_of_best']:.3f}); time outside the engine's steps: median "
          f"{100 * record['median_python_share_outside_steps']:.2f}% of generate()")
    if a.json_output:
        Path(a.json_output).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
