#!/usr/bin/env python3
"""Writes bench/RESULTS.md from the records in bench/records/*.json.

Each record holds one benchmark's current numbers on one machine, with the workload, the
date and commit they were measured at, how the hardware floor is counted, and the peer
where one was measured beside quiver. The floors are worked out here from the bytes or
FLOPs in the record and the machine's ceiling (bench/records/machines.json), so a record
never carries a number that could disagree with its own inputs.

    python3 tools/make_results.py           # rewrite bench/RESULTS.md
    python3 tools/make_results.py --check   # exit 1 if bench/RESULTS.md is not the output
"""
import argparse
import difflib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "bench" / "records"
OUTPUT = ROOT / "bench" / "RESULTS.md"


def load():
    machines = json.loads((RECORDS / "machines.json").read_text())
    records = {}
    parts = []
    for path in sorted(RECORDS.glob("*.json")):
        if path.name == "machines.json":
            continue
        rec = json.loads(path.read_text())
        for key in ("machine", "date", "commit"):
            if key not in rec:
                sys.exit(f"{path.name}: no '{key}'")
        if "part_of" in rec:
            parts.append(rec)
        else:
            records[rec["benchmark"]] = rec
    for part in parts:  # rows measured at another commit join their benchmark's table
        host = records[part["part_of"]]
        for row in part["rows"]:
            host["rows"].append(dict(row, date=part["date"], commit=part["commit"]))
    return machines, records


def n(x, digits=2):
    return f"{x:,.{digits}f}"


def tok_s(x):
    return n(x, 1) if x < 10 else n(x, 0)


def pct(x):
    return f"{100 * x:.0f}%"


def ceiling(rec, machines, key):
    return machines[rec["machine"]]["ceilings"][key]


def provenance(rec, machines):
    m = machines[rec["machine"]]
    return f"{m['name']}, {rec['date']}, commit `{rec['commit']}`."


def header(rec, machines, lines):
    lines += [f"### {rec['title']}", ""]
    lines.append(f"{provenance(rec, machines)} {rec['workload']}.")
    if "floor" in rec:
        lines.append(f"Floor: {rec['floor']}.")
    lines.append(f"Command: {rec['command']}; re-run: {rec['rerun']}.")
    lines.append("")


def decode(rec, machines, lines):
    bw = ceiling(rec, machines, "bandwidth_gbs")
    header(rec, machines, lines)
    peer = {r["batch"]: r for r in rec.get("peer", {}).get("rows", [])}
    table_head(lines, "batch", "base ms (floor)", "with adapters ms (floor)", "of the ceiling",
               "LoRA cost", "tok/s", "HF + PEFT base / adapters ms", "HF + PEFT tok/s", "commit")
    rows = sorted(rec["rows"], key=lambda r: (r["batch"], r.get("mode", "")))
    for r in rows:
        fb, fl = r["base_gb"] / bw * 1e3, r["lora_gb"] / bw * 1e3
        batch = f"{r['batch']}, {r['mode']}" if "mode" in r else str(r["batch"])
        cost = f"+{100 * (r['lora_ms'] / r['base_ms'] - 1):.1f}%"
        p = peer.get(r["batch"]) if "mode" not in r else None
        pcell = f"{n(p['base_ms'], 1)} / {n(p['lora_ms'], 1)}" if p else ""
        ptok = tok_s(r["batch"] / p["lora_ms"] * 1e3) if p else ""
        lines.append(f"| {batch} | {n(r['base_ms'])} ({n(fb)}) | {n(r['lora_ms'])} ({n(fl)}) "
                     f"| {pct(fb / r['base_ms'])} / {pct(fl / r['lora_ms'])} | {cost} "
                     f"| {n(r['batch'] / r['lora_ms'] * 1e3, 0)} | {pcell} | {ptok} "
                     f"| `{r.get('commit', rec['commit'])}` |")
    close(rec, lines,
          "Decode step p50; the floor is the step's bytes at the ceiling; \"of the ceiling\" is floor "
          "over measured, base / with adapters; tok/s is the batch over the step with adapters.",
          *([f"Peer: {rec['peer']['name']}: {rec['peer']['how']}."] if "peer" in rec else []))


def throughput(rec, machines, lines):
    bw = ceiling(rec, machines, "bandwidth_gbs")
    header(rec, machines, lines)
    floor = rec["decode_gb"] / bw * 1e3
    table_head(lines, "output tok/s", "end to end", "prefill / mixed / decode",
               "decode step p50 (floor)", "of the ceiling")
    for r in rec["runs"]:
        lines.append(f"| **{n(r['output_tok_s'], 0)}** | {n(r['seconds'], 3)} s "
                     f"| {n(r['prefill_s'], 3)} / {n(r['mixed_s'], 3)} / {n(r['decode_s'], 3)} s "
                     f"| {n(r['decode_p50_ms'])} ms ({n(floor)}) | {pct(floor / r['decode_p50_ms'])} |")
    close(rec, lines, f"Steps: {rec['steps']}. {rec['spread']}")


def prefill(rec, machines, lines):
    c = ceiling(rec, machines, "bf16_tflops")
    header(rec, machines, lines)
    table_head(lines, "tokens", "adapters", "with adapters: time (floor), TFLOP/s, of the ceiling",
               "base: time (floor), TFLOP/s, of the ceiling")

    def cell(s, rate):
        return f"{n(s * 1e3, 0)} ms ({n(s * rate / c * 1e3, 0)}), {n(rate, 0)}, {pct(rate / c)}"

    for r in rec["rows"]:
        base = cell(r["base_s"], r["base_tflops"]) if "base_s" in r else ""
        lines.append(f"| {r['tokens']:,} | {r['adapters']} | {cell(r['lora_s'], r['lora_tflops'])} "
                     f"| {base} |")
    close(rec, lines, "TFLOP/s of the linear layers as `quiver bench` prints them; the floor is the "
          "step's linear FLOPs (time × rate) at the ceiling.")


def checks(rec, machines, lines):
    lines += [f"### {rec['title']}", "", f"{provenance(rec, machines)} Re-run: {rec['rerun']}.", ""]
    lines += [f"- {item}" for item in rec["items"]]
    lines.append("")


def cpu_decode(rec, machines, lines):
    bw = ceiling(rec, machines, "bandwidth_gbs")
    header(rec, machines, lines)
    d, p = rec["decode"], rec["prefill"]
    floor = d["gb"] / bw * 1e3
    table_head(lines, "", "quiver", "floor", "peer")
    lines.append(f"| decode tok/s, best of 3 (median) | **{n(d['tok_s_best'])}** ({n(d['tok_s_median'])}) "
                 f"| {n(1e3 / floor, 1)} | {rec['peer']['name']}: ~{rec['peer']['decode_tok_s']} |")
    lines.append(f"| decode step min / p50 / p90 | {n(d['step_min_ms'], 1)} / {n(d['step_p50_ms'], 1)} / "
                 f"{n(d['step_p90_ms'], 1)} ms | {n(floor, 1)} ms ({n(d['gb'], 3)} GB) | |")
    lines.append(f"| achieved bandwidth | {n(d['achieved_gbs_mean'], 1)} GB/s mean "
                 f"| {pct(d['achieved_gbs_mean'] / bw)} of the ceiling | |")
    lines.append(f"| prefill, {p['tokens']}-token prompt | **{n(p['tok_s'], 1)} tok/s** "
                 f"({n(p['seconds'], 3)} s), {p['linear_gflops']} GFLOP/s in the linear layers | | |")
    peer = rec["peer"]
    close(rec, lines, f"Peer: {peer['name']}, about {peer['decode_tok_s']} tok/s {peer['how']}.")


def cpu_lora(rec, machines, lines):
    bw = ceiling(rec, machines, "bandwidth_gbs")
    header(rec, machines, lines)
    table_head(lines, "case", "decode tok/s, A / B", "decode tok/s ratio", "step p50 (floor)",
               "commit")
    for r in rec["rows"]:
        ratio = f"×{r['decode_ratio']:.3f}" if r["decode_ratio"] < 2 else f"**×{r['decode_ratio']:.2f}**"
        if "p50_ratio" in r:
            ratio += f" (step p50 ×{r['p50_ratio']:.3f})"
        if "output_ratio" in r:
            ratio += f" (end-to-end output tok/s **×{r['output_ratio']:.2f}**)"
        lines.append(f"| {r['case']} | {n(r['tok_s'])} / {n(r['other_tok_s'])} | {ratio} "
                     f"| {n(r['p50_ms'], 1)} ms ({n(r['gb'] / bw * 1e3, 1)}, {n(r['gb'], 3)} GB) "
                     f"| `{r.get('commit', rec['commit'])}` |")
    close(rec, lines)


PRECISION_MODES = {"columns": [["highest", "`highest` (f32 activations)"], ["default", "`default` (bf16 activations)"]],
                   "ratio": ["default", "highest"]}


def cpu_modes(rec, machines, lines):
    """Rows of (case, the values of each mode, floor or peak): modes of one build run in turn.
    The record's "columns" name the modes ([key, heading] each), "ratio" the two whose means
    are divided ([numerator, denominator])."""
    header(rec, machines, lines)
    cols, (top, bottom) = rec.get("columns", PRECISION_MODES["columns"]), rec.get("ratio", PRECISION_MODES["ratio"])
    heads = dict(cols)
    table_head(lines, "case", *(h for _, h in cols), f"{top} / {bottom}" if "ratio" not in rec
               else f"{heads[top]} / {heads[bottom]}", "bound")

    def mean(v):
        return sum(v) / len(v)

    for r in rec["rows"]:
        values = " | ".join(" / ".join(n(x, 1) for x in r[k]) for k, _ in cols)
        lines.append(f"| {r['case']} | {values} | ×{mean(r[top]) / mean(r[bottom]):.2f} (means) | {r['bound']} |")
    close(rec, lines)


def online_table(lines, rows, first, tok_digits):
    """The online mode's rows: rate, duration, throughput, TTFT / ITL / E2E percentiles, and
    preemptions where the rows have them."""
    extra = ["preemptions"] if rows and "preemptions" in rows[0] else []
    table_head(lines, first, "duration", "output tok/s", "TTFT p50 / p90 / p99 ms", "ITL p50 / p90 / p99 ms",
               "E2E p50 / p90 / p99 ms", *extra)

    def trio(v):
        return " / ".join(f"{x:,}" for x in v)

    for r in rows:
        tail = f" {r['preemptions']} |" if extra else ""
        lines.append(f"| {r['rate']} | {n(r['duration_s'], 1)} s | {n(r['output_tok_s'], tok_digits)} "
                     f"| {trio(r['ttft_ms'])} | {trio(r['itl_ms'])} | {trio(r['e2e_ms'])} |{tail}")


def cpu_online(rec, machines, lines):
    header(rec, machines, lines)
    online_table(lines, rec["rows"], "rate (req/s)", 1)
    close(rec, lines)


def serving(rec, machines, lines):
    bw = ceiling(rec, machines, "bandwidth_gbs")
    header(rec, machines, lines)
    lines += [f"Start-up memory plan: `{rec['memory']['line']}` ({rec['memory']['how']}).", ""]
    table_head(lines, "workload", "KV", "KV tokens", "output tok/s", "decode step p50 (floor)", "of the ceiling",
               "preemptions", "target")
    for r in rec["rows"]:
        floor = r["decode_gb"] / bw * 1e3
        lines.append(f"| {r['case']} | {r['kv']} | {r['kv_tokens']:,} | **{n(r['output_tok_s'], 0)}** "
                     f"| {n(r['decode_p50_ms'])} ms ({n(floor)}) | {pct(floor / r['decode_p50_ms'])} "
                     f"| {r['preemptions']} | {r['target']} |")
    lines.append("")
    online_table(lines, rec["online"], "online rate (req/s)", 0)
    close(rec, lines)


def tokenizer(rec, machines, lines):
    header(rec, machines, lines)
    table_head(lines, "", "MB/s", "first pass", "load")
    for r in rec["rows"]:
        lines.append(f"| {r['what']} | **{n(r['mb_s'], 1)}** | {n(r['first_pass_mb_s'], 1)} MB/s "
                     f"| {n(r['load_s'], 2)} s |")
    lines.append("")


def before_after(rec, machines, lines):
    header(rec, machines, lines)
    table_head(lines, "case", f"before (`{rec['before']}`)", f"after (`{rec['commit']}`)", "after / before")
    for r in rec["rows"]:
        ratios = " / ".join(f"{y / x:.3f}" for x, y in zip(r["before"], r["after"]))
        lines.append(f"| {r['case']} | {' / '.join(n(x) for x in r['before'])} "
                     f"| {' / '.join(n(x) for x in r['after'])} | {ratios} |")
    close(rec, lines)


def cpu_python(rec, machines, lines):
    header(rec, machines, lines)
    table_head(lines, "workload", "pairs", "quiver bench tok/s", "LLM.generate tok/s", "median pair ratio Python / C++",
               "outside the engine's steps")
    for r in rec["rows"]:
        lines.append(f"| {r['what']} | {r['pairs']} | {r['cpp_tok_s']} | {r['python_tok_s']} | "
                     f"**{n(r['median_ratio'], 3)}** | {r['outside_steps']} |")
    close(rec, lines)


def structured(rec, machines, lines):
    header(rec, machines, lines)
    table_head(lines, "workload", "decode step p50, unconstrained", "with the constraint",
               "median pair ratio")
    for r in rec["rows"]:
        lines.append(f"| {r['what']} | {r['plain_p50_ms']} ms | {r['structured_p50_ms']} ms "
                     f"| **×{r['median_ratio']:.3f}** |")
    close(rec, lines)


def vocab(rec, machines, lines):
    header(rec, machines, lines)
    table_head(lines, "workload", "vocabulary", "with adapters ms", "base ms", "median ratio",
               "bytes the vocabulary adds / step", "their floor ms")
    for r in rec["rows"]:
        lines.append(f"| {r['what']} | `{r['vocab']}` | {n(r['lora_ms'])} | {n(r['base_ms'])} | **×{r['ratio']:.3f}** | "
                     f"{r['added_bytes']} | {r['added_floor_ms']:g} |")
    close(rec, lines)


def cpu_peer(rec, machines, lines):
    """Rows of (workload, peer median and range, quiver median and range, unit): both engines
    alternating in one run, with each quiver run's own read-rate probe beside it."""
    header(rec, machines, lines)
    table_head(lines, "workload", f"{rec['peer']['name']} median (range)", "quiver median (range)",
               f"quiver / {rec['peer']['name']}", "quiver's bound")
    for r in rec["rows"]:
        def cell(v):
            return f"{n(v[0], r.get('digits', 1))} ({n(v[1], r.get('digits', 1))}-{n(v[2], r.get('digits', 1))})"
        ratio = r["quiver"][0] / r["peer"][0]
        if r.get("lower_is_better"):
            ratio = 1 / ratio
        lines.append(f"| {r['what']} | {cell(r['peer'])} | {cell(r['quiver'])} | **×{ratio:.2f}** | {r['bound']} |")
    close(rec, lines, f"Peer: {rec['peer']['name']} {rec['peer']['how']}.")


def cpu_kernels(rec, machines, lines):
    """bench_cpu_matmul: one shape and token count a row, each kernel's time and rate."""
    header(rec, machines, lines)
    table_head(lines, "weight (out x in), tokens", "f32 activations", "bf16 dot products, row-major weights",
               "bf16, packed weights", "packed: of the bound", "bound")
    peak = ceiling(rec, machines, "bf16_tflops") * 1e3
    bw = ceiling(rec, machines, "bandwidth_gbs")
    for r in rec["rows"]:
        flop = 2 * r["out"] * r["in"] * r["tokens"]
        gb = r["out"] * r["in"] * 2 / 1e9
        def cell(us):
            return f"{n(us, 0)} us, {n(gb / us * 1e6, 1)} GB/s" if r["tokens"] == 1 else \
                f"{n(us, 0)} us, {n(flop / us / 1e3, 0)} GFLOP/s"
        if r["tokens"] == 1:
            share, bound = f"{pct(gb / r['packed_us'] * 1e6 / bw)} of {bw} GB/s", "memory: the weight's bytes"
        else:
            share, bound = f"{pct(flop / r['packed_us'] / 1e3 / peak)} of {n(peak, 0)} GFLOP/s", \
                "the cores' vdpbf16ps peak" + (" and the weight's bytes" if r["tokens"] < 64 else "")
        lines.append(f"| {r['out']} x {r['in']}, {r['tokens']} | {cell(r['f32_us'])} | {cell(r['dot_us'])} "
                     f"| **{cell(r['packed_us'])}** | {share} | {bound} |")
    close(rec, lines)


def table_head(lines, *columns):
    lines.append("|" + "|".join(f" {c} " if c else " " for c in columns) + "|")
    lines.append("|" + "---|" * len(columns))


def close(rec, lines, *sentences):
    """Ends a benchmark's section: a blank line, the sentences under its table, its notes."""
    lines.append("")
    lines.extend(sentences)
    notes(rec, lines)


def notes(rec, lines):
    for note in rec.get("notes", []):
        lines.append(f"- {note}")
    if rec.get("notes") or lines[-1]:
        lines.append("")


KINDS = {"decode": decode, "throughput": throughput, "prefill": prefill, "checks": checks,
         "cpu-decode": cpu_decode, "cpu-lora": cpu_lora, "cpu-online": cpu_online,
         "cpu-precision": cpu_modes, "cpu-int8": cpu_modes, "fp8-h200": cpu_modes, "fp8-h100": cpu_modes,
         "attention-h100": cpu_modes, "attention-gqa-h100": cpu_modes, "tokenizer": tokenizer,
         "cpu-python": cpu_python, "python-h200": cpu_python, "before-after": before_after,
         "structured-h200": structured, "structured-cpu": structured, "serving-h200": serving,
         "serving-h100": serving, "vocab-h200": vocab, "cpu-peer": cpu_peer, "cpu-kernels": cpu_kernels}

INTRO = """\
# quiver benchmark results

The current numbers, one section per benchmark: workload, machine, date, commit, the number,
the hardware floor beside it, and the peer where one was measured. `tools/make_results.py`
writes this file from `bench/records/` (a JSON file per benchmark and machine); its `--check`
(a ctest test) fails when the two disagree.

## What is counted

- **Decode step**: the p50 of the decode-only steps. A warm-up pass comes first, so thread
  start-up and loading adapters into slots are not counted. **tok/s** sums over the batch.
- **Bytes a decode step reads**: every weight except the input embedding table (a decode
  step gathers a few of its rows; a tied table counts in full, as the lm_head), one slice per
  distinct adapter in the batch (A and B of all 7 targets, padded to `max_lora_rank`), and
  2 · layers · kv_heads · head_dim · context · element size of KV for each sequence.
- **Floor** = those bytes over the machine's bandwidth ceiling (for prefill, the linear
  layers' FLOPs, 2 per multiply-add, over the bf16 GEMM ceiling); **of the ceiling** = floor
  over measured. `quiver bench` prints both (`--mem-bandwidth-gbs` sets the ceiling).
- **Comparisons** (`--compare base|sequential|structured`) alternate A and B passes in one process and
  take the median of the per-iteration ratios, so load that changes over time hits both.
"""

MACHINES = """\
## Machines

| machine | hardware | ceilings |
|---|---|---|
"""

RERUN = """\
## Re-running

- **CPU**: `bench/run_tinyllama.sh BUILD_DIR OUT_DIR cpu 2` runs every TinyLlama case above,
  one `quiver bench --json-output` file each (`CASES="b1-base ..."` picks some); the tokenizer:
  the `bench_tokenizer` target and `tools/bench_hf_tokenizers.js`, both under `taskset -c 0`.
- **GPU**: `tools/gpu/fetch_deps.sh` once (Debian packages the GPU image lacks, into `.deps/`),
  carried with the tree. `tools/gpu/run_checks.sh` builds, runs the GPU tests, the HF fixtures,
  `quiver verify` and the decode and throughput benchmarks (`FIX=1 VERIFY=1 BENCHC=1
  BENCHAB=1`; its header lists the variables); `tools/gpu/run_invariance.sh` is the CUDA
  invariance suite every change to CUDA code passes; `TREES="main other"
  tools/gpu/compare_trees.sh` builds, tests and benchmarks trees exported into
  `build-trees/<name>` in one run (a host varies by about 3%: never compare across runs);
  `tools/gpu/bench_switch.sh` compares settings of one binary; `tools/gpu/variant_binaries.sh`
  links a build's binaries again against older versions of a few source files (a kernel
  before and after a change, in one run, without a second tree); `tools/gpu/peer_hf_peft.py`
  measures the HF + PEFT peer and `tools/gpu/run_python.sh` the Python package.
"""


def render(machines, records):
    lines = INTRO.splitlines() + [""] + MACHINES.splitlines()
    for m in machines.values():
        c = m["ceilings"]
        ceil = f"{c['bandwidth_gbs']:,} GB/s: {c['bandwidth_how']}"
        if "bf16_tflops" in c:
            ceil += f"; {c['bf16_tflops']:g} TFLOP/s bf16: {c['bf16_how']}"
        lines.append(f"| {m['name']} | {m['hardware']} | {ceil} |")
    lines.append("")
    for machine in machines:
        recs = [r for r in records.values() if r["machine"] == machine]
        if not recs:
            continue
        lines += [f"## {machines[machine]['name']}", ""]
        for rec in recs:
            KINDS[rec["benchmark"]](rec, machines, lines)
    lines += RERUN.splitlines()
    return "\n".join(lines).rstrip() + "\n"


ORDER = ["decode", "fp8-h200", "fp8-h100", "attention-h100", "attention-gqa-h100", "throughput", "serving-h200",
         "serving-h100", "prefill", "structured-h200", "vocab-h200", "before-after", "checks", "python-h200",
         "cpu-peer", "cpu-decode", "cpu-kernels", "cpu-int8", "cpu-precision", "cpu-lora", "cpu-online",
         "cpu-python", "structured-cpu", "tokenizer"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args()
    machines, records = load()
    records = {k: records[k] for k in sorted(records, key=lambda k: ORDER.index(k))}
    text = render(machines, records)
    if args.check:
        old = OUTPUT.read_text() if OUTPUT.exists() else ""
        if old != text:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                       "bench/RESULTS.md", "tools/make_results.py"))
            print("bench/RESULTS.md differs from the records: run python3 tools/make_results.py",
                  file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}: {text.count(chr(10))} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
