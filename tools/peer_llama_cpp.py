#!/usr/bin/python3
"""Helpers of tools/peer_llama_cpp.sh (quiver against llama.cpp on the CPU).

  model CONFIG_DIR TOKENIZER_DIR OUT [--seed N]
      a random Hugging Face Llama checkpoint: CONFIG_DIR/config.json, model.safetensors
      (bfloat16, the scales of quiver's --load-format dummy), the tokenizer.json and
      tokenizer_config.json of TOKENIZER_DIR, and a SentencePiece tokenizer.model with the
      same pieces and ids.
  bin-adapter SRC DST
      a copy of the PEFT adapter folder SRC with adapter_model.bin (torch.save of the same
      tensors) in place of adapter_model.safetensors.
  convert SCRIPT ARGS...
      runs one of llama.cpp's converters with Debian 12's Python packages (see run_converter).
  check LLAMA_CPP_SRC MODEL_DIR MODEL_GGUF [ADAPTER_DIR ADAPTER_GGUF]...
      every GGUF tensor holds the values of its safetensors source.
  serve LLAMA_SERVER MODEL_DIR MODEL_GGUF THREADS REQUESTS INPUT_LEN OUTPUT_LEN SEED RESULT LOG ADAPTER_GGUF...
      starts llama-server on 127.0.0.1 with every adapter loaded at scale 0 and REQUESTS
      slots, checks that each adapter changes a greedy completion, then sends REQUESTS
      completions at once (request i on adapter i mod the adapter count; INPUT_LEN random
      prompt ids, OUTPUT_LEN tokens, greedy, ignore_eos) and writes their wall time to RESULT.
  table RUN_DIR
      the medians and ranges of the raw outputs in RUN_DIR.

Runs with Debian's /usr/bin/python3 and its python3-numpy, python3-torch (bin-adapter,
convert), python3-sentencepiece and python3-protobuf (model); serve uses the standard library.
"""
import json
import math
import random
import re
import runpy
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import types
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np


# ---- safetensors ------------------------------------------------------------------------

def to_bf16(x):
    """float32 array -> bfloat16 bits (uint16), rounded to nearest even."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, specs, make):
    """specs: [(name, shape)] of bfloat16 tensors; make(name, shape) -> uint16 array.
    Streams one tensor at a time; the header is padded so the data starts 8-byte aligned."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in specs:
        n = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, shape in specs:
            data = make(name, shape)
            assert data.dtype == np.uint16 and data.size == math.prod(shape), name
            f.write(data.tobytes())


def read_safetensors(path):
    """{name: (dtype string, shape, bytes as a uint8 array mapped from the file)}"""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    return {name: (t["dtype"], t["shape"], data[t["data_offsets"][0]:t["data_offsets"][1]])
            for name, t in header.items() if name != "__metadata__"}


def as_float32(dtype, raw):
    if dtype == "BF16":
        return (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, dtype={"F16": np.float16, "F32": np.float32}[dtype]).astype(np.float32)


# ---- model --------------------------------------------------------------------------------

def llama_tensors(c):
    h, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    heads = c["num_attention_heads"]
    kv_heads = c.get("num_key_value_heads", heads)
    d = c.get("head_dim", h // heads)
    s_in, s_f = 1 / math.sqrt(h), 1 / math.sqrt(f)
    # (name, shape, center, half-width): uniform weights as quiver's dummy loader draws them.
    t = [("model.embed_tokens.weight", (v, h), 0.0, 1.0)]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t += [
            (p + "input_layernorm.weight", (h,), 1.0, 0.1),
            (p + "self_attn.q_proj.weight", (heads * d, h), 0.0, s_in),
            (p + "self_attn.k_proj.weight", (kv_heads * d, h), 0.0, s_in),
            (p + "self_attn.v_proj.weight", (kv_heads * d, h), 0.0, s_in),
            (p + "self_attn.o_proj.weight", (h, heads * d), 0.0, 1 / math.sqrt(heads * d)),
            (p + "post_attention_layernorm.weight", (h,), 1.0, 0.1),
            (p + "mlp.gate_proj.weight", (f, h), 0.0, s_in),
            (p + "mlp.up_proj.weight", (f, h), 0.0, s_in),
            (p + "mlp.down_proj.weight", (h, f), 0.0, s_f),
        ]
    t.append(("model.norm.weight", (h,), 1.0, 0.1))
    if not c.get("tie_word_embeddings", False):
        t.append(("lm_head.weight", (v, h), 0.0, s_in))
    return t


def write_sentencepiece_model(tokenizer_json, out):
    """A BPE tokenizer.model with the vocabulary of a SentencePiece-style tokenizer.json
    (Llama / Mistral: '▁' for spaces, <0xXX> byte fallback). Scores follow the ids, which in
    these vocabularies are the merge order."""
    from sentencepiece import sentencepiece_model_pb2 as spm

    tok = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    model = tok["model"]
    if model.get("type") != "BPE" or not model.get("byte_fallback"):
        sys.exit(f"{tokenizer_json}: not a byte-fallback BPE (SentencePiece-style) tokenizer")
    pieces = {i: p for p, i in model["vocab"].items()}
    special = {t["id"] for t in tok.get("added_tokens", []) if t.get("special")}
    unk = model["vocab"].get(model.get("unk_token") or "<unk>", 0)
    m = spm.ModelProto()
    for i in range(len(pieces)):
        p = m.pieces.add()
        p.piece = pieces[i]
        if i == unk:
            p.type, p.score = spm.ModelProto.SentencePiece.UNKNOWN, 0.0
        elif i in special:
            p.type, p.score = spm.ModelProto.SentencePiece.CONTROL, 0.0
        elif re.fullmatch(r"<0x[0-9A-F]{2}>", pieces[i]):
            p.type, p.score = spm.ModelProto.SentencePiece.BYTE, 0.0
        else:
            p.type, p.score = spm.ModelProto.SentencePiece.NORMAL, -float(i)
    ids = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    ts = m.trainer_spec
    ts.model_type = spm.TrainerSpec.BPE
    ts.vocab_size = len(pieces)
    ts.byte_fallback = True
    ts.unk_id = unk
    ts.bos_id = ids.get("<s>", -1)
    ts.eos_id = ids.get("</s>", -1)
    ts.pad_id = -1
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = True
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    Path(out).write_bytes(m.SerializeToString())
    import sentencepiece  # the file must load as a tokenizer
    sp = sentencepiece.SentencePieceProcessor(model_file=str(out))
    assert sp.vocab_size() == len(pieces)


def cmd_model(args):
    config_dir, tokenizer_dir, out = Path(args[0]), Path(args[1]), Path(args[2])
    seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 0
    cfg = json.loads((config_dir / "config.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(config_dir / "config.json", out / "config.json")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, out / name)
    write_sentencepiece_model(tokenizer_dir / "tokenizer.json", out / "tokenizer.model")
    tensors = llama_tensors(cfg)
    scale = {name: (center, half) for name, _, center, half in tensors}
    rng = np.random.default_rng(seed)

    def make(name, shape):
        center, half = scale[name]
        x = rng.random(math.prod(shape), dtype=np.float32)
        x *= 2 * half
        x += center - half
        return to_bf16(x)

    tmp = out / "model.safetensors.tmp"
    write_safetensors(tmp, [(n, s) for n, s, _, _ in tensors], make)
    tmp.rename(out / "model.safetensors")
    total = sum(math.prod(s) for _, s, _, _ in tensors)
    print(f"wrote {out}: {len(tensors)} tensors, {total / 1e9:.3f} B parameters, bfloat16, seed {seed}")


def cmd_bin_adapter(args):
    import torch

    src, dst = Path(args[0]), Path(args[1])
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "adapter_config.json", dst / "adapter_config.json")
    kinds = {"BF16": (np.int16, torch.bfloat16), "F16": (np.float16, None), "F32": (np.float32, None)}
    state = {}
    for name, (dtype, shape, raw) in read_safetensors(src / "adapter_model.safetensors").items():
        np_type, view = kinds[dtype]
        t = torch.from_numpy(np.frombuffer(raw, dtype=np_type).copy()).reshape(shape)
        state[name] = t.view(view) if view is not None else t
    torch.save(state, dst / "adapter_model.bin")
    print(f"wrote {dst}/adapter_model.bin: {len(state)} tensors from {src}/adapter_model.safetensors")


# ---- converters -----------------------------------------------------------------------------

def run_converter(script, argv):
    """Runs a llama.cpp converter (convert_hf_to_gguf.py, convert_lora_to_gguf.py) in this
    process, with its bundled gguf-py first on the path, after two stand-ins for what
    Debian 12 lacks:
    - transformers (not packaged): the converters import AutoConfig / AutoTokenizer at the
      top. The stand-in raises on use; reading the base model's hyperparameters then takes
      the converters' own fallback to config.json, and the Llama vocabulary comes from
      tokenizer.model through sentencepiece, which needs no transformers.
    - torch 1.13 (python3-torch) predates the float8 dtypes that the converters name in
      their dtype tables; placeholder objects fill those names, which only an FP8
      checkpoint would look up (this one is bfloat16).
    The third missing package, safetensors (for adapter weights), is avoided by handing the
    LoRA converter adapter_model.bin (see bin-adapter), which it reads with torch.load."""
    import torch

    try:
        import transformers  # noqa: F401  (a real one, if present, is used as is)
    except ImportError:
        stub = types.ModuleType("transformers")

        class _Unavailable:
            @classmethod
            def from_pretrained(cls, *a, **k):
                raise OSError("transformers is not installed (Debian 12 has no package)")

        stub.AutoConfig = type("AutoConfig", (_Unavailable,), {})
        stub.AutoTokenizer = type("AutoTokenizer", (_Unavailable,), {})
        sys.modules["transformers"] = stub
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, name):
            setattr(torch, name, type(name, (), {})())
    root = Path(script).resolve().parent
    sys.path[:0] = [str(root / "gguf-py"), str(root)]
    sys.argv = [str(script)] + list(argv)
    runpy.run_path(str(script), run_name="__main__")


# ---- checks --------------------------------------------------------------------------------

def cmd_check(args):
    """Every tensor of the GGUF files holds the values of its source tensor: bit for bit, or
    the same values in another order (the Llama converter permutes the rows of q and k, and
    of their LoRA B, for its rotary layout); 1-D norms are widened to float32 exactly."""
    src, model_dir, model_gguf = Path(args[0]), Path(args[1]), args[2]
    sys.path.insert(0, str(src / "gguf-py"))
    import gguf

    cfg = json.loads((model_dir / "config.json").read_text())
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg["num_hidden_layers"])

    def gguf_values(t):
        raw = np.asarray(t.data).tobytes()
        kind = {gguf.GGMLQuantizationType.BF16: "BF16", gguf.GGMLQuantizationType.F16: "F16",
                gguf.GGMLQuantizationType.F32: "F32"}.get(t.tensor_type)
        if kind is None:
            sys.exit(f"{t.name}: unexpected GGUF type {t.tensor_type.name}")
        return as_float32(kind, raw)

    def compare(what, source, gguf_file, name_of):
        tensors = {t.name: t for t in gguf.GGUFReader(gguf_file).tensors}
        exact = reordered = 0
        for name, (dtype, _, raw) in source.items():
            gname = name_of(name)
            if gname not in tensors:
                sys.exit(f"{what}: {name} ({gname}) is not in {gguf_file}")
            x, y = as_float32(dtype, raw), gguf_values(tensors.pop(gname))
            if np.array_equal(x, y):
                exact += 1
            elif x.size == y.size and np.array_equal(np.sort(x), np.sort(y)):
                reordered += 1
            else:
                sys.exit(f"{what}: {name} and {gname} hold different values")
        if tensors:
            sys.exit(f"{what}: {gguf_file} has tensors with no source: {sorted(tensors)[:5]}")
        print(f"{what}: {exact + reordered} tensors hold the source values "
              f"({exact} bit for bit, {reordered} with rows reordered)")

    compare("model", read_safetensors(model_dir / "model.safetensors"), model_gguf,
            lambda n: names.get_name(n, try_suffixes=(".weight", ".bias")))
    if len(args) > 3:
        def lora_name(n):
            base = n.replace("base_model.model.", "")
            for part, tag in ((".lora_A.weight", "lora_a"), (".lora_B.weight", "lora_b")):
                if base.endswith(part):
                    return names.get_name(base.replace(part, ".weight"), try_suffixes=(".weight",)) + "." + tag
            sys.exit(f"adapter: unexpected tensor {n}")

        for adapter_dir, adapter_gguf in zip(args[3::2], args[4::2]):
            compare(f"adapter {Path(adapter_dir).name}", read_safetensors(Path(adapter_dir) / "adapter_model.safetensors"),
                    adapter_gguf, lora_name)


# ---- llama-server ---------------------------------------------------------------------------

def http_json(port, path, body=None, timeout=900):
    """GET (body None) or POST a JSON body to the server on 127.0.0.1:port; the decoded reply."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json"} if data is not None else {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc, port, log, limit_s=600):
    """Polls /health until the model is loaded (200; 503 while loading)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            sys.exit(f"llama-server exited with {proc.returncode} before it was ready (see {log})")
        try:
            http_json(port, "/health", timeout=5)
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.25)
    sys.exit(f"llama-server was not ready after {limit_s} s (see {log})")


def complete(port, prompt, n_predict, adapter, banned, **extra):
    """One greedy /completion of the token ids `prompt` with the per-request `lora` field:
    adapter `adapter` at scale 1 and every other at 0, or all at 0 for adapter None.
    `banned`: token ids kept out of the output through logit_bias (see cmd_serve)."""
    body = {"prompt": prompt, "n_predict": n_predict, "ignore_eos": True, "temperature": 0.0,
            "return_tokens": True, "lora": [{"id": 0 if adapter is None else adapter,
                                             "scale": 0.0 if adapter is None else 1.0}],
            "logit_bias": [[t, False] for t in banned], **extra}
    return http_json(port, "/completion", body)


def check_adapters(port, n_adapters, vocab, banned, n_predict=8):
    """Sets every adapter's default scale to 0 (at this llama.cpp, --lora-init-without-apply
    only keeps them off the context at start-up: /lora-adapters still lists scale 1, which a
    request without a `lora` field would get), then checks that each adapter, requested
    through the per-request `lora` field, changes the greedy tokens or their probabilities of
    one short prompt, and that no two adapters give the same."""
    http_json(port, "/lora-adapters", [{"id": a, "scale": 0.0} for a in range(n_adapters)])
    loaded = http_json(port, "/lora-adapters")
    if len(loaded) != n_adapters or any(float(a.get("scale", 1)) != 0.0 for a in loaded):
        sys.exit(f"llama-server lists {loaded}, expected {n_adapters} adapters at scale 0")
    probe = [random.Random(7).randrange(3, vocab) for _ in range(16)]

    def signature(r):
        return tuple(r["tokens"]), json.dumps(r.get("completion_probabilities"), sort_keys=True)

    base = complete(port, probe, n_predict, None, banned, n_probs=1, cache_prompt=False)
    seen = {}
    for a in range(n_adapters):
        r = complete(port, probe, n_predict, a, banned, n_probs=1, cache_prompt=False)
        if signature(r) == signature(base):
            sys.exit(f"adapter {a} left the completion unchanged: the per-request lora field did not apply it")
        if signature(r) in seen:
            sys.exit(f"adapters {seen[signature(r)]} and {a} give the same completion")
        seen[signature(r)] = a
        print(f"adapter {a}: tokens {r['tokens']} (without: {base['tokens']})")
    return {"probe_without": base["tokens"], "adapters_differ": True}


def cmd_serve(args):
    server, model_dir, model_gguf, threads = args[0], Path(args[1]), args[2], args[3]
    n_req, n_in, n_out, seed = (int(x) for x in args[4:8])
    result, log, loras = Path(args[8]), Path(args[9]), args[10:]
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    # The byte tokens <0x80>..<0xFF> are banned: random weights emit them in orders that are
    # not UTF-8, and this llama-server answers such a completion with an error 500 (its
    # final parse of the text as a chat message fails). The ban is a logit bias on 128 of the
    # 32,000 ids; the engine's own ignore_eos already adds one.
    pieces = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    banned = [pieces[f"<0x{b:02X}>"] for b in range(0x80, 0x100)]
    port = free_port()
    # One slot a request, each with room for its prompt and output (the context is split
    # evenly over the slots); every adapter loaded at scale 0, chosen per request.
    cmd = [server, "-m", model_gguf, "-t", threads, "-np", str(n_req), "-c", str(n_req * (n_in + n_out + 64)),
           "--host", "127.0.0.1", "--port", str(port), "--no-webui", "--lora-init-without-apply",
           "--lora", ",".join(loras)]
    with open(log, "w") as out:
        out.write(" ".join(cmd) + "\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_ready(proc, port, log)
        check = check_adapters(port, len(loras), vocab, banned)
        rng = random.Random(seed)
        prompts = [[rng.randrange(3, vocab) for _ in range(n_in)] for _ in range(n_req)]
        replies, ends, errors = [None] * n_req, [0.0] * n_req, []
        go = threading.Event()

        def one(i):
            go.wait()
            try:
                replies[i] = complete(port, prompts[i], n_out, i % len(loras), banned)
            except Exception as e:  # noqa: BLE001  (reported below)
                errors.append(f"request {i}: {e}")
            ends[i] = time.perf_counter()

        workers = [threading.Thread(target=one, args=(i,)) for i in range(n_req)]
        for w in workers:
            w.start()
        t0 = time.perf_counter()
        go.set()
        for w in workers:
            w.join()
        wall = max(ends) - t0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if errors:
        sys.exit("; ".join(errors))
    per_request = []
    for i, r in enumerate(replies):
        want = [{"id": i % len(loras), "scale": 1.0}]
        got = r.get("generation_settings", {}).get("lora")
        if r["tokens_predicted"] != n_out or len(r["tokens"]) != n_out or r["tokens_evaluated"] != n_in:
            sys.exit(f"request {i}: {r['tokens_evaluated']} prompt tokens and {r['tokens_predicted']} generated "
                     f"({len(r['tokens'])} returned), expected {n_in} and {n_out}")
        if got != want:
            sys.exit(f"request {i}: the server ran it with lora {got}, expected {want}")
        per_request.append({"adapter": i % len(loras), "slot": r.get("id_slot"), "end_s": ends[i] - t0,
                            "timings": r.get("timings")})
    out = {"wall_s": wall, "requests": n_req, "adapters": len(loras), "input_len": n_in, "output_len": n_out,
           "output_tokens": n_req * n_out, "output_tokens_per_s": n_req * n_out / wall, "slots": n_req,
           "threads": int(threads), "command": cmd, "banned_token_ids": banned, "check": check,
           "per_request": per_request}
    result.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{n_req} requests over {len(loras)} adapters: {wall:.2f} s, {n_req * n_out / wall:.2f} output tok/s")


# ---- results --------------------------------------------------------------------------------

# (key, label); the raw files are KEY.rN.llama.* and KEY.rN.quiver.json.
WORKLOADS = [
    ("prefill", "prefill {pp} tokens, tok/s"),
    ("decode", "decode batch 1, {tg} tokens, tok/s"),
    ("decode_depth", "decode batch 1, {tg} tokens at KV depth {depth}, tok/s"),
    ("lora", "decode batch 1, {tg} tokens, 1 adapter r=16, tok/s"),
]
# Requests sent at once, request i on adapter i mod the adapter count (r=16, all 7
# projections): (key, requests, adapters). The raw files are KEY.rN.llama.json (cmd_serve)
# and KEY.rN.quiver.json.
MIXED = [
    ("mixed4x4", 4, 4),
    ("mixed16x8", 16, 8),
]


def read_mixed(path, meta, requests):
    """(wall seconds, output tok/s) of one mixed-adapter run: the pass's end_to_end in
    quiver's --json-output, or cmd_serve's result."""
    d = json.loads(path.read_text())
    if path.name.endswith(".quiver.json"):
        e = d["best"]["end_to_end"]
        if e["output_tokens"] != requests * meta["mixed_out"]:
            raise SystemExit(f"{path}: {e['output_tokens']} output tokens, expected {requests * meta['mixed_out']}")
        return e["seconds"], e["output_tokens_per_s"]
    return d["wall_s"], d["output_tokens_per_s"]


def read_value(path, meta):
    """tok/s of one raw output: quiver's --json-output, llama-bench's JSON lines, or
    llama-completion's log (its 'eval time' line: the tokens decoded after the first)."""
    key = path.name.split(".")[0]
    text = path.read_text()
    if path.name.endswith(".quiver.json"):
        return json.loads(text)["best"]["prefill" if key == "prefill" else "decode"]["tokens_per_s"]
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        if not rows:
            raise SystemExit(f"{path}: no result line")
        return rows[-1]["avg_ts"]
    prompt = re.search(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens", text)
    ev = re.search(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs", text)
    if not prompt or not ev:
        raise SystemExit(f"{path}: no timings")
    if int(prompt.group(1)) != meta["tg"] or int(ev.group(2)) != meta["tg"] - 1:
        raise SystemExit(f"{path}: {prompt.group(1)} prompt tokens and {ev.group(2)} decoded, "
                         f"expected {meta['tg']} and {meta['tg'] - 1}")
    return int(ev.group(2)) / (float(ev.group(1)) / 1000)


def cmd_table(args):
    run = Path(args[0])
    meta = json.loads((run / "meta.json").read_text())
    vals = {}
    for key in [k for k, _ in WORKLOADS] + ["lora_base"]:
        for engine in ("llama", "quiver"):
            files = sorted(p for p in run.glob(f"{key}.r*.{engine}.*") if p.suffix in (".json", ".jsonl", ".txt"))
            vals[key, engine] = [read_value(p, meta) for p in files]
    for key, requests, _ in MIXED:
        for engine in ("llama", "quiver"):
            files = sorted(run.glob(f"{key}.r*.{engine}.json"))
            pairs = [read_mixed(p, meta, requests) for p in files]
            vals[key, engine] = [w for w, _ in pairs]
            vals[key + ".tok", engine] = [t for _, t in pairs]
    quiver_commit = "?"
    for p in run.glob("*.quiver.json"):
        quiver_commit = json.loads(p.read_text())["machine"].get("git_commit", "?")
        break
    n = meta["rounds"]
    print(f"llama.cpp {meta['llama_cpp_commit'][:10]} against quiver {meta['quiver']} (run in a tree at {quiver_commit}): "
          f"{meta['threads']} threads, {n} round{'s' if n != 1 else ''}, the engines alternating; {meta['cpu']}")
    print(f"model {meta['model']}: random bfloat16 weights, the same values in both engines")
    print()
    head = f"{'':<62} {'llama.cpp median (range)':>26} {'quiver median (range)':>26} {'lead':>7}"
    print(head)
    print("-" * len(head))

    def cell(v):
        return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" if v else "-"

    def ratio(a, b):
        return f"{statistics.median(a) / statistics.median(b):.3f}" if a and b else "-"

    for key, label in WORKLOADS:
        l, q = vals[key, "llama"], vals[key, "quiver"]
        if l or q:
            print(f"{label.format(**meta):<62} {cell(l):>26} {cell(q):>26} {ratio(q, l):>7}")
    if vals["lora_base", "llama"]:
        label = f"decode batch 1, {meta['tg']} tokens, no adapter (llama-completion)"
        print(f"{label:<62} {cell(vals['lora_base', 'llama']):>26} {'-':>26}")
    l_cost, q_cost = ratio(vals["lora", "llama"], vals["lora_base", "llama"]), ratio(vals["lora", "quiver"], vals["decode", "quiver"])
    if l_cost != "-" or q_cost != "-":
        print(f"{'decode with the adapter / without (same tool)':<62} {l_cost:>26} {q_cost:>26}")
    for key, requests, adapters in MIXED:
        l, q = vals[key, "llama"], vals[key, "quiver"]
        if l or q:
            what = f"{requests} requests on {adapters} adapters r=16, {meta['mixed_in']}+{meta['mixed_out']} tokens"
            print(f"{what + ', wall s':<62} {cell(l):>26} {cell(q):>26} {ratio(l, q):>7}")
            l, q = vals[key + ".tok", "llama"], vals[key + ".tok", "quiver"]
            print(f"{what + ', output tok/s':<62} {cell(l):>26} {cell(q):>26} {ratio(q, l):>7}")
    print("\nlead: quiver's tok/s / llama.cpp's, or llama.cpp's wall time / quiver's (above 1: quiver ahead)")
    loads = [float(x.split()[0]) for x in (run / "load.txt").read_text().splitlines() if x.strip()]
    if loads:
        print(f"\n1-minute load before the runs: {min(loads):.2f}-{max(loads):.2f}; raw outputs in {run}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "model" and len(args) >= 3:
        cmd_model(args)
    elif cmd == "bin-adapter" and len(args) == 2:
        cmd_bin_adapter(args)
    elif cmd == "convert" and args:
        run_converter(args[0], args[1:])
    elif cmd == "check" and len(args) >= 3 and len(args) % 2 == 1:
        cmd_check(args)
    elif cmd == "serve" and len(args) >= 11:
        cmd_serve(args)
    elif cmd == "table" and len(args) == 1:
        cmd_table(args)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
