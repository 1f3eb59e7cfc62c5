#!/usr/bin/env python3
"""Builds quiver's end-to-end reference fixtures from the real Hugging Face stack.

Tiny random-weight Llama / Mistral / Qwen2 checkpoints and PEFT LoRA adapters are created from
config objects (no network), saved with save_pretrained, reloaded FROM DISK in float32 on CPU with
eager attention, and run greedily to record expected tokens and log-probabilities. File formats and
method: tests/fixtures/README.md. Needs torch, transformers >= 5, peft, safetensors; run it through
tools/gpu/run_fixtures.sh on the GPU machine. Deterministic: every random draw comes from fixed seeds.
"""
import argparse
import copy
import json
import math
import os
import platform
import random
import re
import shutil
from pathlib import Path

# No network on the fixture machine: never let a library try the Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
import peft  # noqa: E402
import safetensors  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig, MistralConfig, Qwen2Config  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
TARGETS = ATTN + MLP
MAX_TOKENS = 12
TOP_N, PROMPT_TOP_N = 5, 3
MARGIN_MIN = 1e-2
README_MARKER = "<!-- results: everything below this line is written by tools/make_fixtures.py -->"
SIZE_LIMIT_BYTES = 12 * 1024 * 1024

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
DTYPE_NAME = {F32: "float32", BF16: "bfloat16", F16: "float16"}
BASE_SCALES = dict(emb_std=1.0, gain=1.0, qk_gain=1.5, head_gain=2.0, norm_jitter=0.1, bias_std=0.3)


def adapter(name, r, alpha, targets, **kw):
    return dict(name=name, r=r, alpha=alpha, targets=targets, rslora=kw.get("rslora", False),
                rank_pattern=kw.get("rank_pattern", {}), alpha_pattern=kw.get("alpha_pattern", {}),
                layers=kw.get("layers"), dtype=kw.get("dtype", F32))


MODELS = [
    dict(name="llama_gqa", seed=1001, config_cls=LlamaConfig, storage=F32, sharded=True, classic_config=True,
         config=dict(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=3,
                     num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
                     tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
         generation=dict(bos_token_id=1, eos_token_id=2),
         lengths=[1, 2, 5, 17, 40, 63], long_prompts=[],
         adapters=[
             adapter("r1_qv", 1, 2, ["q_proj", "v_proj"]),
             adapter("r8_all", 8, 16, "all-linear"),
             adapter("r16_rslora", 16, 8, ["q_proj", "k_proj", "v_proj", "o_proj", "down_proj"], rslora=True),
             adapter("r64_mlp", 64, 32, list(MLP)),
             adapter("r4_patterns", 4, 8, ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj"],
                     rank_pattern={"o_proj": 2},
                     alpha_pattern={"o_proj": 3, "model.layers.1.self_attn.v_proj": 16}),
             adapter("regex_qk", 4, 4, r".*\.layers\.[02]\.self_attn\.(q_proj|k_proj)|.*\.layers\.1\.mlp\.up_proj"),
             adapter("layers_02", 4, 8, list(TARGETS), layers=[0, 2]),
             adapter("bf16_qkvo", 8, 16, list(ATTN), dtype=BF16),
         ]),
    dict(name="llama3_bf16", seed=2002, config_cls=LlamaConfig, storage=BF16, sharded=False, classic_config=False,
         config=dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                     rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=[2, 3],
                     rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 64}),
         generation=dict(bos_token_id=1, eos_token_id=[2, 3, 4]),
         lengths=[1, 2, 5, 17, 40, 63], long_prompts=[(100, None), (100, "all_bf16")],
         adapters=[
             adapter("all_bf16", 8, 16, "all-linear", dtype=BF16),
             adapter("qv_r2", 2, 4, ["q_proj", "v_proj"]),
         ]),
    dict(name="qwen2_tied", seed=3003, config_cls=Qwen2Config, storage=F16, sharded=False, classic_config=False,
         config=dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
                     tie_word_embeddings=True, use_sliding_window=False, bos_token_id=None, eos_token_id=2,
                     rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         generation=dict(eos_token_id=[2, 5]),
         lengths=[1, 2, 5, 17, 40, 63], long_prompts=[],
         adapters=[
             adapter("all_r8", 8, 8, "all-linear"),
             adapter("kv_down_f16", 4, 4, ["k_proj", "v_proj", "down_proj"], rslora=True, dtype=F16),
         ]),
    dict(name="mistral", seed=4004, config_cls=MistralConfig, storage=F32, sharded=False, classic_config=False,
         config=dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=256, rms_norm_eps=1e-5,
                     tie_word_embeddings=False, sliding_window=None, bos_token_id=1, eos_token_id=2,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
         generation=dict(bos_token_id=1, eos_token_id=2),
         lengths=[1, 2, 5, 17, 40, 63], long_prompts=[],
         adapters=[
             adapter("all_r4", 4, 8, "all-linear"),
             adapter("o_gate_r16", 16, 16, ["o_proj", "gate_proj"]),
         ]),
]


def log(msg=""):
    print(msg, flush=True)


def fail(msg):
    raise SystemExit(f"make_fixtures: FAILED: {msg}")


def check(cond, msg):
    if not cond:
        fail(msg)


WARNINGS = []


def warn(msg):
    WARNINGS.append(msg)
    log(f"!!! WARNING: {msg}")


def versions():
    v = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
         "peft": peft.__version__, "safetensors": getattr(safetensors, "__version__", "?"),
         "platform": platform.platform()}
    try:
        import tokenizers
        v["tokenizers"] = tokenizers.__version__
    except Exception as e:  # not needed here; only reported
        v["tokenizers"] = f"unavailable ({e})"
    return v


# ---------------------------------------------------------------------------------------------- models

def build_config(spec):
    cfg = spec["config_cls"](**copy.deepcopy(spec["config"]))  # transformers edits rope dicts in place
    rp = getattr(cfg, "rope_parameters", None)
    check(isinstance(rp, dict), f"{spec['name']}: config has no rope_parameters dict (transformers < 5?): {rp!r}")
    for k, v in spec["config"]["rope_parameters"].items():
        check(rp.get(k) == v, f"{spec['name']}: rope_parameters[{k}] = {rp.get(k)!r}, wanted {v!r}")
    check(cfg.num_key_value_heads == spec["config"]["num_key_value_heads"], "num_key_value_heads not kept")
    if "head_dim" in spec["config"]:
        check(cfg.head_dim == spec["config"]["head_dim"], "explicit head_dim not kept")
    if spec["config_cls"] is MistralConfig:
        check(cfg.sliding_window is None, f"mistral sliding_window = {cfg.sliding_window!r}, wanted None")
    if spec["config_cls"] is Qwen2Config:
        check(cfg.sliding_window is None, f"qwen2 sliding_window = {cfg.sliding_window!r}, wanted None")
    return cfg


def new_model(cfg):
    try:
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    except TypeError:
        model = AutoModelForCausalLM.from_config(cfg)
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation("eager")
    if cfg.tie_word_embeddings and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        model.tie_weights()  # in case construction leaves tying to load time
    for n, p in model.named_parameters():
        check(p.dtype == F32, f"fresh model parameter {n} is {p.dtype}, expected float32")
    return model.eval()


def load_model(model_dir):
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=F32, attn_implementation="eager")
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "eager":
        warn(f"{model_dir}: attention implementation is {impl!r}, asked for 'eager'")
    for n, p in model.named_parameters():
        check(p.dtype == F32, f"{model_dir}: loaded parameter {n} is {p.dtype}, expected float32")
    return model.eval()


def check_architecture(spec, model):
    tied = spec["config"]["tie_word_embeddings"]
    same = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    check(same == tied, f"{spec['name']}: lm_head tied={same}, config says {tied}")
    attn = model.model.layers[0].self_attn
    qwen = spec["config_cls"] is Qwen2Config
    for proj in ("q_proj", "k_proj", "v_proj"):
        check((getattr(attn, proj).bias is not None) == qwen, f"{spec['name']}: {proj} bias presence wrong")
    check(attn.o_proj.bias is None, f"{spec['name']}: o_proj has a bias")


def init_base_weights(spec, model, gen, scales):
    hidden = spec["config"]["hidden_size"]
    tied = spec["config"]["tie_word_embeddings"]
    head_std = scales["head_gain"] / math.sqrt(hidden)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied lm_head is listed once, as embed_tokens
            noise = torch.randn(p.shape, generator=gen, dtype=F32)
            if name.endswith("embed_tokens.weight"):
                p.copy_(noise * (head_std if tied else scales["emb_std"]))
            elif name.startswith("lm_head."):
                p.copy_(noise * head_std)
            elif "norm" in name and name.endswith(".weight"):
                p.copy_(1.0 + scales["norm_jitter"] * noise)
            elif name.endswith(".bias"):
                p.copy_(scales["bias_std"] * noise)
            elif name.endswith(".weight") and p.dim() == 2:
                gain = scales["qk_gain"] if (".q_proj." in name or ".k_proj." in name) else scales["gain"]
                p.copy_(noise * gain / math.sqrt(p.shape[1]))
            else:
                fail(f"{spec['name']}: no init rule for parameter {name} {tuple(p.shape)}")


def llama3_inv_freq(rp, head_dim):
    """Llama 3.1 frequency smoothing written out independently, to cross-check transformers."""
    inv = 1.0 / (rp["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    orig, factor = rp["original_max_position_embeddings"], rp["factor"]
    low_wl, high_wl = orig / rp["low_freq_factor"], orig / rp["high_freq_factor"]
    wl = 2 * math.pi / inv
    scaled = torch.where(wl > low_wl, inv / factor, inv)
    smooth = (orig / wl - rp["low_freq_factor"]) / (rp["high_freq_factor"] - rp["low_freq_factor"])
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wl >= high_wl) & (wl <= low_wl)
    return torch.where(medium, smoothed, scaled)


def check_rope(spec, model, record):
    rp = spec["config"]["rope_parameters"]
    rot = getattr(model.model, "rotary_emb", None)
    if rot is None or not hasattr(rot, "inv_freq"):
        warn(f"{spec['name']}: model.model.rotary_emb.inv_freq not found; rope not cross-checked")
        return
    head_dim = spec["config"].get("head_dim", spec["config"]["hidden_size"] // spec["config"]["num_attention_heads"])
    if rp["rope_type"] == "llama3":
        want = llama3_inv_freq(rp, head_dim)
    else:
        want = 1.0 / (rp["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    got = rot.inv_freq.detach().double().cpu()
    rel = float(((got - want).abs() / want).max())
    record["rope_inv_freq_max_rel_diff_vs_own_formula"] = rel
    record["rope_attention_scaling"] = float(getattr(rot, "attention_scaling", 1.0))
    log(f"  rope {rp['rope_type']}: inv_freq vs own formula max rel diff {rel:.2e}, "
        f"attention_scaling {record['rope_attention_scaling']}")
    if rel > 1e-5:
        warn(f"{spec['name']}: transformers rope inv_freq differs from the written-out formula (rel {rel:.2e})")


# ------------------------------------------------------------------------------------------ inference

@torch.no_grad()
def forward_logits(model, seq):
    ids = torch.tensor([seq], dtype=torch.long)
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    logits = out.logits[0]
    check(logits.dtype == F32 and logits.shape[0] == len(seq), f"unexpected logits {logits.dtype} {tuple(logits.shape)}")
    return logits


def top_pairs(lp, n):
    top = torch.topk(lp, n)
    return [[int(i), float(v)] for i, v in zip(top.indices, top.values)]


@torch.no_grad()
def run_greedy(model, prompt, max_tokens, with_prompt=True):
    seq = list(prompt)
    res = {"token_ids": [], "logprobs": [], "top_logprobs": [], "margins": []}
    logits = forward_logits(model, seq)
    if with_prompt:
        lp_all = torch.log_softmax(logits.double(), dim=-1)  # row i predicts token i + 1
        res["prompt_logprobs"] = [None] + [float(lp_all[i - 1, seq[i]]) for i in range(1, len(seq))]
        tops = [None] + [top_pairs(lp_all[i - 1], PROMPT_TOP_N) for i in range(1, len(seq))]
        res["prompt_top_logprobs"] = tops
        res["prompt_margins"] = [None] + [t[0][1] - t[1][1] for t in tops[1:]]
    for step in range(max_tokens):
        if step:
            logits = forward_logits(model, seq)
        lp = torch.log_softmax(logits[-1].double(), dim=-1)
        check(bool(torch.isfinite(lp).all()), "non-finite logprobs")
        tok = int(torch.argmax(lp))
        top = top_pairs(lp, TOP_N)
        check(top[0][1] == float(lp[tok]), "topk and argmax disagree")
        res["token_ids"].append(tok)
        res["logprobs"].append(float(lp[tok]))
        res["top_logprobs"].append(top)
        res["margins"].append(top[0][1] - top[1][1])
        seq.append(tok)
    return res


def peak_stats(results):
    top1 = [math.exp(t[0][1]) for r in results for t in r["top_logprobs"]]
    margins = [m for r in results for m in r["margins"]]
    gen = [t for r in results for t in r["token_ids"]]
    return {"positions": len(margins), "mean_top1_prob": sum(top1) / len(top1),
            "min_top1_prob": min(top1), "frac_margin_gt_1e-2": sum(m > MARGIN_MIN for m in margins) / len(margins),
            "min_margin": min(margins), "distinct_generated_tokens": len(set(gen))}


def prompt_peak_stats(results):
    margins = [m for r in results for m in r["prompt_margins"][1:]]
    top1 = [math.exp(t[0][1]) for r in results for t in r["prompt_top_logprobs"][1:]]
    if not margins:
        return {"positions": 0}
    return {"positions": len(margins), "mean_top1_prob": sum(top1) / len(top1),
            "frac_margin_gt_1e-2": sum(m > MARGIN_MIN for m in margins) / len(margins)}


def calibrate_peakedness(spec, model, probes):
    """Scales the final norm weight (hence every logit) until greedy distributions are peaked."""
    norm = model.model.norm.weight
    original = norm.detach().clone()
    factor, history = 1.0, []
    for _ in range(30):
        with torch.no_grad():
            norm.copy_(original * factor)
        st = peak_stats([run_greedy(model, p, 8, with_prompt=False) for p in probes])
        history.append({"norm_factor": factor, **st})
        log(f"  calibrate norm x{factor:.4f}: mean top1 {st['mean_top1_prob']:.3f}, "
            f"margin>1e-2 {st['frac_margin_gt_1e-2']:.3f}")
        if st["mean_top1_prob"] > 0.85:
            factor /= 1.15
        elif st["mean_top1_prob"] < 0.4 or st["frac_margin_gt_1e-2"] < 0.97:
            factor *= 1.15
        else:
            return factor, history
    # No factor met both targets: keep the measured one closest to them (margins first).
    best = max(history, key=lambda h: (h["frac_margin_gt_1e-2"] >= 0.97, -abs(h["mean_top1_prob"] - 0.5)))
    with torch.no_grad():
        norm.copy_(original * best["norm_factor"])
    warn(f"{spec['name']}: peakedness calibration did not converge; keeping {best}")
    return best["norm_factor"], history


# ----------------------------------------------------------------------------------------- checkpoint

def read_checkpoint(model_dir):
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = sorted(set(weight_map.values()))
    else:
        weight_map, files = None, ["model.safetensors"]
    tensors = {}
    for f in files:
        check((model_dir / f).exists(), f"{model_dir}: missing {f}")
        for k, v in load_file(str(model_dir / f)).items():
            check(k not in tensors, f"{model_dir}: tensor {k} stored twice")
            check(weight_map is None or weight_map.get(k) == f, f"{model_dir}: index puts {k} elsewhere than {f}")
            tensors[k] = v
    check(weight_map is None or set(weight_map) == set(tensors), f"{model_dir}: index and shards disagree")
    return tensors, files


def verify_loaded(model, tensors, where):
    """Every stored tensor equals the loaded (upcast) parameter; every parameter was stored."""
    sd = model.state_dict()
    for k, v in tensors.items():
        check(k in sd, f"{where}: stored tensor {k} is not a model parameter (name conversion?)")
        check(torch.equal(sd[k], v.to(F32)), f"{where}: loaded {k} differs from the file")
    for n, _ in model.named_parameters():
        check(n in tensors, f"{where}: parameter {n} is not in the checkpoint")


def save_base(spec, model, model_dir, record):
    storage = spec["storage"]
    model.to(storage)
    model.config.dtype = storage
    kwargs = {}
    if spec["sharded"]:
        total = sum(p.numel() * p.element_size() for p in model.parameters())
        kwargs["max_shard_size"] = int(total * 0.45)  # bytes; aims at 3 shards
    model.save_pretrained(str(model_dir), **kwargs)
    GenerationConfig(**spec["generation"]).save_pretrained(str(model_dir))
    cfg_json = json.loads((model_dir / "config.json").read_text())
    written_dtype = cfg_json.get("dtype", cfg_json.get("torch_dtype"))
    check(written_dtype == DTYPE_NAME[storage], f"{spec['name']}: config.json dtype {written_dtype!r}")
    tensors, files = read_checkpoint(model_dir)
    for k, v in tensors.items():
        check(v.dtype == storage, f"{spec['name']}: stored {k} as {v.dtype}, wanted {storage}")
    if spec["sharded"]:
        check(2 <= len(files) <= 6, f"{spec['name']}: {len(files)} shards, wanted 2-6 ({kwargs})")
    else:
        check(files == ["model.safetensors"], f"{spec['name']}: unexpected files {files}")
    record.update(files=files, config_keys_as_written=sorted(cfg_json), max_shard_size=kwargs.get("max_shard_size"),
                  lm_head_stored="lm_head.weight" in tensors,
                  generation_config=json.loads((model_dir / "generation_config.json").read_text()))
    log(f"  saved {len(tensors)} tensors in {files}; config keys: {sorted(cfg_json)}")
    return tensors


def rewrite_config_classic(spec, model_dir, tensors, record):
    """Rewrites config.json to the pre-v5 keys if transformers 5 loads it to identical logits."""
    path = model_dir / "config.json"
    original_text = path.read_text()
    cfg = json.loads(original_text)
    rp = cfg.pop("rope_parameters", None)
    if isinstance(rp, dict) and rp.get("partial_rotary_factor", 1.0) == 1.0:
        rp = {k: v for k, v in rp.items() if k != "partial_rotary_factor"}  # the classic form's default
    if not isinstance(rp, dict) or rp.get("rope_type") != "default" or set(rp) - {"rope_type", "rope_theta"}:
        record["config_form"] = f"transformers 5 form kept: unexpected rope_parameters {rp!r}"
        warn(f"{spec['name']}: not rewriting config.json: rope_parameters is {rp!r}")
        return
    cfg["rope_theta"] = rp["rope_theta"]
    cfg["rope_scaling"] = None
    cfg["torch_dtype"] = cfg.pop("dtype", cfg.get("torch_dtype"))
    before = load_model(model_dir)
    probe = list(range(3, 60))
    want = forward_logits(before, probe)
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    try:
        after = load_model(model_dir)
        verify_loaded(after, tensors, f"{spec['name']} (classic config)")
        same_rope = all(after.config.rope_parameters.get(k) == v for k, v in before.config.rope_parameters.items())
        diff = float((forward_logits(after, probe) - want).abs().max())
    except (Exception, SystemExit) as e:  # keep the v5 form and say so
        same_rope, diff = False, f"load failed: {e!r}"
    if same_rope and diff == 0.0:
        record["config_form"] = "classic (rope_theta, rope_scaling, torch_dtype), verified to reload identically"
        log("  config.json rewritten to the classic form; transformers reloads it to identical logits")
    else:
        path.write_text(original_text)
        record["config_form"] = f"transformers 5 form kept: classic form did not reload identically ({diff})"
        warn(f"{spec['name']}: classic config form rejected: rope same {same_rope}, logits diff {diff}")


# ------------------------------------------------------------------------------------------- adapters

def lora_modules(peft_model):
    found = {}
    for name, m in peft_model.named_modules():
        lora_a = getattr(m, "lora_A", None)
        if isinstance(lora_a, torch.nn.ModuleDict) and "default" in lora_a:
            hit = re.search(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)$", name)
            check(hit is not None and hit.group(2) in TARGETS, f"LoRA on unexpected module {name}")
            found[(int(hit.group(1)), hit.group(2))] = m
    return found


def module_key(layer, target):
    return f"model.layers.{layer}.{'self_attn' if target in ATTN else 'mlp'}.{target}"


def expected_targets(a, num_layers):
    hits = set()
    for layer in range(num_layers):
        for t in TARGETS:
            tm = a["targets"]
            if tm == "all-linear":
                hit = True
            elif isinstance(tm, str):
                hit = re.fullmatch(tm, module_key(layer, t)) is not None
            else:
                hit = t in tm and (a["layers"] is None or layer in a["layers"])
            if hit:
                hits.add((layer, t))
    return hits


def pattern_value(patterns, key, default):
    """PEFT's rank_pattern/alpha_pattern lookup: exact name, or the pattern matching a name suffix."""
    for pat, val in patterns.items():
        if key == pat or re.match(rf"(.*\.)?({pat})$", key):
            return val
    return default


def lora_config(a):
    kw = dict(r=a["r"], lora_alpha=a["alpha"], target_modules=a["targets"], lora_dropout=0.0, bias="none",
              use_rslora=a["rslora"], init_lora_weights=False, task_type="CAUSAL_LM")
    if a["rank_pattern"]:
        kw["rank_pattern"] = dict(a["rank_pattern"])
    if a["alpha_pattern"]:
        kw["alpha_pattern"] = dict(a["alpha_pattern"])
    if a["layers"] is not None:
        kw["layers_to_transform"] = list(a["layers"])
    return LoraConfig(**kw)


def describe_modules(spec, a, modules):
    """PEFT's actual rank/alpha/scaling per module, checked against the documented rule."""
    out, mismatches = {}, []
    for (layer, t), m in sorted(modules.items()):
        r, alpha, s = m.r["default"], m.lora_alpha["default"], m.scaling["default"]
        out[f"L{layer}.{t}"] = {"r": r, "alpha": alpha, "scaling": s}
        key = module_key(layer, t)
        er = pattern_value(a["rank_pattern"], key, a["r"])
        ea = pattern_value(a["alpha_pattern"], key, a["alpha"])
        es = ea / math.sqrt(er) if a["rslora"] else ea / er
        if r != er or abs(s - es) > 1e-12:
            mismatches.append(f"L{layer}.{t}: peft r={r} alpha={alpha} s={s}, rule r={er} alpha={ea} s={es}")
    if mismatches:
        warn(f"{spec['name']}/{a['name']}: PEFT scaling differs from the documented rule: {mismatches}")
    return out, mismatches


def init_lora(modules, rel, gen):
    """Random A, B with ||scaling * B @ A||_F = rel * ||W||_F for every module."""
    with torch.no_grad():
        for key in sorted(modules):
            m = modules[key]
            wa, wb = m.lora_A["default"].weight, m.lora_B["default"].weight
            w = m.get_base_layer().weight
            a = torch.randn(wa.shape, generator=gen, dtype=F32) / math.sqrt(wa.shape[1])
            b = torch.randn(wb.shape, generator=gen, dtype=F32)
            delta = m.scaling["default"] * (b @ a)
            b *= rel * w.norm() / delta.norm()
            wa.copy_(a)
            wb.copy_(b)


def scale_lora_b(modules, factor):
    with torch.no_grad():
        for m in modules.values():
            m.lora_B["default"].weight.mul_(factor)


def build_adapter(spec, a, index, model_dir, probes, base_probe_tokens, record):
    adir = model_dir / "adapters" / a["name"]
    gen = torch.Generator().manual_seed(spec["seed"] * 100 + index)
    pm = get_peft_model(load_model(model_dir), lora_config(a)).eval()
    modules = lora_modules(pm)
    want = expected_targets(a, spec["config"]["num_hidden_layers"])
    if set(modules) != want:
        warn(f"{spec['name']}/{a['name']}: PEFT targeted {sorted(modules)} but the spec implies {sorted(want)}")
    rel, history = 0.3, []
    init_lora(modules, rel, gen)
    for _ in range(8):
        outs = [run_greedy(pm, p, 8, with_prompt=False)["token_ids"] for p in probes]
        changed = sum(o != b for o, b in zip(outs, base_probe_tokens)) / len(probes)
        first = sum(o[0] != b[0] for o, b in zip(outs, base_probe_tokens)) / len(probes)
        history.append({"rel": round(rel, 6), "changed_frac": changed, "first_token_changed_frac": first})
        log(f"  adapter {a['name']}: rel {rel:.3f} changes {changed:.2f} of probes ({first:.2f} at token 0)")
        if changed >= 0.75:
            break
        scale_lora_b(modules, 1.3)
        rel *= 1.3
    else:
        warn(f"{spec['name']}/{a['name']}: adapter changes only {history[-1]['changed_frac']:.2f} of probes")
    pm.save_pretrained(str(adir))
    st_path, cfg_path = adir / "adapter_model.safetensors", adir / "adapter_config.json"
    check(st_path.exists() and cfg_path.exists(), f"{adir}: PEFT did not write adapter_config.json + safetensors")
    if a["dtype"] != F32:
        with safe_open(str(st_path), framework="pt") as f:
            meta = f.metadata() or {"format": "pt"}
        tensors = load_file(str(st_path))
        save_file({k: v.to(a["dtype"]).contiguous() for k, v in tensors.items()}, str(st_path), metadata=meta)
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = spec["name"]  # not a path on the machine that made it
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    if (adir / "README.md").exists():
        (adir / "README.md").unlink()  # PEFT's model card: noise in a fixture
    ranks = [m.r["default"] for m in modules.values()]
    record.update(r=a["r"], alpha=a["alpha"], targets=a["targets"], rslora=a["rslora"],
                  rank_pattern=a["rank_pattern"], alpha_pattern=a["alpha_pattern"], layers_to_transform=a["layers"],
                  dtype=DTYPE_NAME[a["dtype"]], rel_scale=rel, calibration=history, max_rank=max(ranks),
                  num_modules=len(modules), adapter_config_as_written=cfg)
    log(f"  adapter {a['name']}: {len(modules)} modules, max rank {max(ranks)}, saved {sorted(os.listdir(adir))}")


def load_adapter_model(spec, a, model_dir, record):
    """Base + adapter, both from disk; checks the loaded LoRA tensors equal the file's."""
    adir = model_dir / "adapters" / a["name"]
    pm = PeftModel.from_pretrained(load_model(model_dir), str(adir), is_trainable=False).eval()
    stored = load_file(str(adir / "adapter_model.safetensors"))
    for k, v in stored.items():
        check(v.dtype == a["dtype"], f"{adir}: {k} stored as {v.dtype}, wanted {a['dtype']}")
    params = dict(pm.named_parameters())
    lora_params = {n for n in params if ".lora_" in n}
    matched = set()
    for k, v in stored.items():
        pk = re.sub(r"\.(lora_[AB])\.weight$", r".\1.default.weight", k)
        check(pk in params, f"{adir}: stored {k} has no loaded parameter {pk}")
        check(params[pk].dtype == F32, f"{adir}: {pk} loaded as {params[pk].dtype}, expected float32 upcast")
        check(torch.equal(params[pk].detach(), v.to(F32)), f"{adir}: loaded {pk} differs from the file")
        matched.add(pk)
    check(matched == lora_params, f"{adir}: LoRA parameters not loaded from the file: {sorted(lora_params - matched)}")
    modules = lora_modules(pm)
    record["modules"], record["scaling_mismatches"] = describe_modules(spec, a, modules)
    return pm


# ------------------------------------------------------------------------------------------- requests

def plan_requests(spec, rng):
    vocab = spec["config"]["vocab_size"]
    names = [a["name"] for a in spec["adapters"]]
    loras, lengths = [None] + names, spec["lengths"]

    def prompt(n):
        return [rng.randrange(3, vocab) for _ in range(n)]

    reqs = []
    for rnd in range(2):  # every adapter twice, at two different lengths
        for j, lora in enumerate(loras):
            reqs.append((prompt(lengths[(j + 3 * rnd) % len(lengths)]), lora))
    # One prompt under several adapters (a prefix cache must key on the adapter) and a shared prefix.
    shared = prompt(40)
    reqs += [(shared, None), (shared, names[0]), (shared, names[1]), (shared[:17] + prompt(23), None)]
    reqs += [(prompt(n), lora) for n, lora in spec["long_prompts"]]
    return [{"id": f"r{i + 1:02d}", "prompt_token_ids": p, "lora": lora, "max_tokens": MAX_TOKENS,
             "temperature": 0.0, "logprobs": 3, "prompt_logprobs": 3, "ignore_eos": True}
            for i, (p, lora) in enumerate(reqs)]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


# ---------------------------------------------------------------------------------------------- driver

def build_model_fixture(spec, out):
    name = spec["name"]
    log(f"=== {name}")
    model_dir = out / name
    if model_dir.exists():
        shutil.rmtree(model_dir)
    model_dir.mkdir(parents=True)
    record = {"architecture": spec["config_cls"].__name__.replace("Config", "ForCausalLM"),
              "storage_dtype": DTYPE_NAME[spec["storage"]], "config_args": spec["config"],
              "scales": dict(BASE_SCALES), "adapters": {}}
    torch.manual_seed(spec["seed"])
    gen = torch.Generator().manual_seed(spec["seed"])
    rng = random.Random(spec["seed"])
    vocab = spec["config"]["vocab_size"]
    probes = [[rng.randrange(3, vocab) for _ in range(n)] for n in (3, 6, 9, 14, 24, 33, 47, 58)]

    model = new_model(build_config(spec))
    check_architecture(spec, model)
    init_base_weights(spec, model, gen, BASE_SCALES)
    factor, history = calibrate_peakedness(spec, model, probes)
    record["scales"]["final_norm_factor"] = factor
    record["peak_calibration"] = history
    tensors = save_base(spec, model, model_dir, record)
    del model

    base = load_model(model_dir)
    verify_loaded(base, tensors, name)
    check_architecture(spec, base)
    check_rope(spec, base, record)
    if spec["classic_config"]:
        rewrite_config_classic(spec, model_dir, tensors, record)
        base = load_model(model_dir)
    else:
        record["config_form"] = "as transformers 5 writes it"

    base_probe_tokens = [run_greedy(base, p, 8, with_prompt=False)["token_ids"] for p in probes]
    for i, a in enumerate(spec["adapters"]):
        record["adapters"][a["name"]] = {}
        build_adapter(spec, a, i, model_dir, probes, base_probe_tokens, record["adapters"][a["name"]])

    requests = plan_requests(spec, rng)
    runners = {None: base}
    for a in spec["adapters"]:
        runners[a["name"]] = load_adapter_model(spec, a, model_dir, record["adapters"][a["name"]])
    # Sanity: a PEFT model with its adapter disabled is the base model.
    first = spec["adapters"][0]["name"]
    with runners[first].disable_adapter():
        diff = float((forward_logits(runners[first], probes[4]) - forward_logits(base, probes[4])).abs().max())
    check(diff < 1e-5, f"{name}: PEFT model with adapter disabled differs from base by {diff}")

    expected = []
    for req in requests:
        res = run_greedy(runners[req["lora"]], req["prompt_token_ids"], req["max_tokens"])
        base_tokens = None
        if req["lora"] is not None:
            base_tokens = run_greedy(base, req["prompt_token_ids"], req["max_tokens"], with_prompt=False)["token_ids"]
        expected.append({"id": req["id"], "lora": req["lora"], "prompt_len": len(req["prompt_token_ids"]), **res,
                         "base_token_ids": base_tokens})
    write_jsonl(model_dir / "requests.jsonl", requests)
    write_jsonl(model_dir / "expected.jsonl", expected)

    record["num_requests"] = len(requests)
    record["peakedness_generated"] = peak_stats(expected)
    record["peakedness_prompt"] = prompt_peak_stats(expected)
    for a in spec["adapters"]:
        mine = [e for e in expected if e["lora"] == a["name"]]
        record["adapters"][a["name"]]["requests"] = len(mine)
        record["adapters"][a["name"]]["requests_changed_vs_base"] = sum(
            e["token_ids"] != e["base_token_ids"] for e in mine) / len(mine)
        check(len(mine) >= 2, f"{name}/{a['name']} is used by {len(mine)} requests")
    pk = record["peakedness_generated"]
    log(f"  {len(requests)} requests: mean top1 {pk['mean_top1_prob']:.3f}, "
        f"margin>1e-2 {pk['frac_margin_gt_1e-2']:.3f}, min margin {pk['min_margin']:.2e}")
    if pk["mean_top1_prob"] < 0.3 or pk["frac_margin_gt_1e-2"] < 0.95:
        warn(f"{name}: final peakedness below target: {pk}")
    manifest = {"model": name, "architecture": record["architecture"], "storage_dtype": record["storage_dtype"],
                "max_lora_rank": max(r["max_rank"] for r in record["adapters"].values()),
                "num_requests": len(requests),
                "adapters": [{"name": a["name"], "path": f"adapters/{a['name']}", "dtype": DTYPE_NAME[a["dtype"]],
                              "max_rank": record["adapters"][a["name"]]["max_rank"],
                              "num_modules": record["adapters"][a["name"]]["num_modules"]}
                             for a in spec["adapters"]]}
    (model_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    record["bytes"] = sum(f.stat().st_size for f in model_dir.rglob("*") if f.is_file())
    return record


def results_markdown(stats, command):
    lines = [README_MARKER, "", "## Results of the last run", "", f"Command: `{command}`", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in stats["versions"].items()), "",
             f"Base weight scales: {stats['base_scales']}. Total size: {stats['total_bytes']} bytes.", "",
             "| model | arch | storage | config form | final norm factor | gen. positions | mean top-1 p "
             "| margin > 1e-2 | min margin | requests |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in stats["models"].items():
        pk = r["peakedness_generated"]
        lines.append(f"| {name} | {r['architecture']} | {r['storage_dtype']} | {r['config_form']} "
                     f"| {r['scales']['final_norm_factor']:.4f} | {pk['positions']} | {pk['mean_top1_prob']:.3f} "
                     f"| {pk['frac_margin_gt_1e-2']:.3f} | {pk['min_margin']:.2e} | {r['num_requests']} |")
    lines += ["", "| model / adapter | r | alpha | targets | dtype | max rank | modules | rel | requests changed vs base |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, r in stats["models"].items():
        for an, a in r["adapters"].items():
            lines.append(f"| {name}/{an} | {a['r']} | {a['alpha']} | `{str(a['targets']).replace('|', chr(92) + '|')}` | {a['dtype']} | {a['max_rank']} "
                         f"| {a['num_modules']} | {a['rel_scale']:.3f} | {a['requests_changed_vs_base']:.2f} |")
    lines += ["", "Warnings: " + ("none" if not stats["warnings"] else ""), ""]
    lines += [f"- {w}" for w in stats["warnings"]]
    return "\n".join(lines) + "\n"


def write_readme(out, stats, command):
    template = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "README.md"
    head = template.read_text().split(README_MARKER)[0] if template.exists() else "# End-to-end reference fixtures\n\n"
    (out / "README.md").write_text(head + results_markdown(stats, command))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures", help="output folder (default tests/fixtures)")
    ap.add_argument("--models", nargs="*", help="only these models (default: all)")
    args = ap.parse_args()

    ver = versions()
    log("versions: " + json.dumps(ver))
    check(int(transformers.__version__.split(".")[0]) >= 5, "transformers >= 5 is required (rope_parameters, dtype)")
    torch.set_num_threads(1)  # bitwise-reproducible CPU reductions
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    specs = [s for s in MODELS if not args.models or s["name"] in args.models]
    check(specs, f"no model matches {args.models}")

    stats = {"versions": ver, "base_scales": BASE_SCALES, "max_tokens": MAX_TOKENS, "models": {}}
    for spec in specs:
        stats["models"][spec["name"]] = build_model_fixture(spec, out)
    stats["total_bytes"] = sum(f.stat().st_size for s in specs for f in (out / s["name"]).rglob("*") if f.is_file())
    if stats["total_bytes"] > SIZE_LIMIT_BYTES:
        warn(f"fixtures take {stats['total_bytes']} bytes, over the {SIZE_LIMIT_BYTES} budget")
    stats["warnings"] = WARNINGS
    command = "python3 tools/make_fixtures.py --out " + args.out + (" --models " + " ".join(args.models)
                                                                     if args.models else "")
    (out / "stats.json").write_text(json.dumps(stats, indent=2, default=str) + "\n")
    write_readme(out, stats, command)
    log(f"done: {len(specs)} models, {stats['total_bytes']} bytes, {len(WARNINGS)} warnings")
    for w in WARNINGS:
        log(f"  warning: {w}")


if __name__ == "__main__":
    main()
