#!/usr/bin/env python3
"""Checks quiver's adapter_model.bin reader against real torch.save, where torch + peft exist.

    python3 tools/gpu/check_torch_bin.py --quiver build-gpu/quiver [--device cpu|cuda] [--out DIR]

For the fixture adapter llama_gqa/r8_all it
  1. loads the base model and the adapter with transformers + PEFT and writes the adapter
     again with save_pretrained(safe_serialization=False): adapter_model.bin by torch.save;
     also in bfloat16 and float16 (the model cast before saving), and once with
     torch.save(..., _use_new_zipfile_serialization=False), the legacy format quiver refuses;
  2. compares the real .bin with tools/make_torch_bin.py's twin (tests/fixtures/torch_bin):
     torch.load must read the twin (same keys in the same order, same values), and the zip's
     record names below the archive folder, the data alignment, and the pickle's opcode and
     GLOBAL sequence must match, so the committed test data stays faithful to torch.save;
  3. runs `quiver generate` on the fixture's r8_all and base requests with the safetensors
     adapter and with each real .bin: float32 outputs must be identical, 16-bit ones must equal
     a run on a safetensors file of the same 16-bit weights; the legacy file must be refused.
Writes DIR/check_torch_bin.json and prints one line per check; exits 1 if any fails.
"""
import argparse
import json
import pickletools
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests/fixtures/llama_gqa"
ADAPTER = MODEL / "adapters/r8_all"
TWIN = ROOT / "tests/fixtures/torch_bin/llama_gqa_r8_all/adapter_model.bin"


def layout(path):
    """(record names below the archive folder, misaligned storages, opcode/GLOBAL sequence)."""
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        prefix = infos[0].filename.split("/")[0] + "/"
        names = sorted(i.filename[len(prefix):] for i in infos)
        with open(path, "rb") as f:
            raw = f.read()
        misaligned = []
        for i in infos:
            if i.filename[len(prefix):].startswith("data/"):
                n, m = int.from_bytes(raw[i.header_offset + 26:i.header_offset + 28], "little"), \
                    int.from_bytes(raw[i.header_offset + 28:i.header_offset + 30], "little")
                if (i.header_offset + 30 + n + m) % 64:
                    misaligned.append(i.filename)
        ops = []
        for op, arg, _ in pickletools.genops(z.read(prefix + "data.pkl")):
            if op.name == "GLOBAL":
                ops.append("GLOBAL " + arg)
            elif op.name not in ("BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET", "MEMOIZE"):
                ops.append(op.name)  # memo traffic depends on what the pickler saw before
    # Bookkeeping records differ between torch versions; quiver reads none of them.
    names = [n for n in names if not n.startswith(".data/") and n not in (".format_version", ".storage_alignment")]
    return names, misaligned, ops


def generate(quiver, adapter_dir, requests, out, device):
    cmd = [quiver, "generate", "--model", str(MODEL), "--lora", f"r8_all={adapter_dir}", "--max-lora-rank", "64",
           "--device", device, "--input", str(requests), "--output", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = [json.loads(l) for l in out.read_text().splitlines() if l.strip()] if p.returncode == 0 else []
    return p.returncode, p.stderr, {l["id"]: l for l in lines}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quiver", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=Path("/tmp/quiver_out"))
    args = ap.parse_args()
    import torch
    from peft import PeftModel
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="torch_bin_"))
    requests = work / "requests.jsonl"
    lines = [l for l in (MODEL / "requests.jsonl").read_text().splitlines()
             if json.loads(l)["lora"] in (None, "r8_all")]
    requests.write_text("\n".join(lines) + "\n")
    report, ok = {"torch": torch.__version__, "checks": []}, True

    def check(name, passed, detail=""):
        nonlocal ok
        ok &= bool(passed)
        report["checks"].append({"check": name, "ok": bool(passed), "detail": detail})
        print(("PASS " if passed else "FAIL ") + name + (": " + detail if detail else ""), flush=True)

    base = AutoModelForCausalLM.from_pretrained(MODEL, torch_dtype=torch.float32)
    model = PeftModel.from_pretrained(base, ADAPTER)
    saved = {}
    for dtype_name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16), ("f16", torch.float16)):
        d = work / dtype_name
        model.to(dtype).save_pretrained(d, safe_serialization=False)
        check(f"{dtype_name}: save_pretrained wrote only adapter_model.bin",
              (d / "adapter_model.bin").exists() and not (d / "adapter_model.safetensors").exists())
        saved[dtype_name] = d
        # The same 16-bit weights as safetensors: quiver's output on those is the reference.
        st = work / (dtype_name + "_st")
        st.mkdir()
        (st / "adapter_config.json").write_bytes((d / "adapter_config.json").read_bytes())
        state = torch.load(d / "adapter_model.bin", weights_only=True)
        save_file({k: v.contiguous() for k, v in state.items()}, st / "adapter_model.safetensors")
        saved[dtype_name + "_st"] = st
    model.to(torch.float32)

    # torch itself must read the committed twin: same keys in the same order, same values.
    from safetensors.torch import load_file
    twin_state = torch.load(TWIN, weights_only=True)
    real_state = torch.load(saved["f32"] / "adapter_model.bin", weights_only=True)
    st_state = load_file(ADAPTER / "adapter_model.safetensors")
    check("torch.load reads the twin: keys in PEFT's order", list(twin_state) == list(real_state),
          f"twin {list(twin_state)[:3]} real {list(real_state)[:3]}")
    check("torch.load reads the twin: values equal the safetensors file",
          twin_state.keys() == st_state.keys() and all(torch.equal(twin_state[k], st_state[k]) for k in st_state))
    real, twin = layout(saved["f32"] / "adapter_model.bin"), layout(TWIN)
    check("zip records match the twin", real[0] == twin[0], f"real {real[0]} twin {twin[0]}")
    check("storages 64-byte aligned", not real[1] and not twin[1], f"real {real[1]} twin {twin[1]}")
    check("pickle opcodes and globals match the twin", real[2] == twin[2],
          "" if real[2] == twin[2] else f"real {real[2][:40]} twin {twin[2][:40]}")

    rc, err, ref = generate(args.quiver, ADAPTER, requests, work / "ref.jsonl", args.device)
    check("safetensors adapter runs", rc == 0 and ref, err[-300:])
    for key in ("f32", "bf16", "f16"):
        rc, err, got = generate(args.quiver, saved[key], requests, work / f"{key}.jsonl", args.device)
        check(f"{key}: real adapter_model.bin runs", rc == 0 and got, err[-300:])
        if key == "f32":
            want = ref
        else:
            rc, err, want = generate(args.quiver, saved[key + "_st"], requests, work / f"{key}_st.jsonl", args.device)
        same = bool(got) and all(got[i][f] == want[i][f] for i in want for f in ("token_ids", "logprobs", "prompt_logprobs"))
        check(f"{key}: identical tokens and logprobs to its safetensors twin", same)

    legacy = work / "legacy"
    legacy.mkdir()
    (legacy / "adapter_config.json").write_bytes((ADAPTER / "adapter_config.json").read_bytes())
    torch.save(torch.load(saved["f32"] / "adapter_model.bin", weights_only=True), legacy / "adapter_model.bin",
               _use_new_zipfile_serialization=False)
    rc, err, _ = generate(args.quiver, legacy, requests, work / "legacy.jsonl", args.device)
    check("legacy format refused by name", rc != 0 and "legacy torch.save format" in err, err[-300:])

    (args.out / "check_torch_bin.json").write_text(json.dumps(report, indent=1) + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
