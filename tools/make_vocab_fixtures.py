#!/usr/bin/env python3
"""Builds the HF + PEFT references of adapters that change vocabulary rows.

Two fixtures in the format of tools/make_fixtures.py's (tests/fixtures/README.md), each a copy of
a base fixture's model files plus adapters in the three layouts the engine reads
(io/adapter_vocab.h):
  llama_vocab   llama_gqa's base (untied lm_head, float32)
  qwen2_vocab   qwen2_tied's base (tied lm_head, float16)
with adapters
  vocab_added     vLLM's layout: LoRA + added_tokens.json + new_embeddings.safetensors (4 new
                  tokens; input_embeddings, and output_embeddings on the untied base)
  vocab_mts       PEFT modules_to_save = [embed_tokens, lm_head] over a vocabulary resized by 4
  vocab_mts_bin   the same adapter, its weights in torch.save's adapter_model.bin
  vocab_tt        PEFT trainable_token_indices (replacement rows of base ids)
The references are HF + PEFT in float32 on the CPU: vLLM's layout has no HF loader, so its
reference is the base resized with the new rows written in, the LoRA loaded on top.
Base requests share the file with adapter requests whose prompts hold the new or retrained ids.

Needs torch, transformers >= 5, peft: run it on the GPU machine from the repo root
  python3 tools/make_vocab_fixtures.py --out "$OUT/vfx" && tar czf "$OUT/vfx.tgz" -C "$OUT" vfx
and unpack the two folders into tests/fixtures. Deterministic: fixed seeds.
"""
import argparse
import json
import os
import random
import shutil
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402
import torch  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

NEW = ["[user]", "[/user]", "[assistant]", "[/assistant]"]
TT_IDS = [7, 19, 64, 300, 511]
BASES = [("llama_vocab", "llama_gqa"), ("qwen2_vocab", "qwen2_tied")]


def lora_cfg(**extra):
    return LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0, bias="none",
                      init_lora_weights=False, task_type="CAUSAL_LM", **extra)


def init_lora(pm, gen):
    mf.init_lora(mf.lora_modules(pm), 0.3, gen)


def rows_like(w, n, gen, scale):
    """n random rows of `scale` times w's mean row norm."""
    r = torch.randn((n, w.shape[1]), generator=gen)
    return r / r.norm(dim=1, keepdim=True) * w.norm(dim=1).mean() * scale


def copy_base(src, dst):
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and (f.name.startswith("model") or f.name in ("config.json", "generation_config.json")):
            shutil.copy2(f, dst / f.name)


def clean_adapter_dir(adir):
    cfg_path = adir / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = "base"  # not a path on the machine that made it
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    if (adir / "README.md").exists():
        (adir / "README.md").unlink()


def build_added(model_dir, tied, gen, stats):
    adir = model_dir / "adapters" / "vocab_added"
    pm = get_peft_model(mf.load_model(model_dir), lora_cfg()).eval()
    init_lora(pm, gen)
    pm.save_pretrained(str(adir))
    clean_adapter_dir(adir)
    base = mf.load_model(model_dir)
    emb, head = base.model.embed_tokens.weight.detach(), base.lm_head.weight.detach()
    inp = rows_like(emb, 4, gen, 1.0)
    out = rows_like(head, 4, gen, 3.0)
    tensors = {"input_embeddings": inp.contiguous()}
    if not tied:
        tensors["output_embeddings"] = out.contiguous()
    save_file(tensors, str(adir / "new_embeddings.safetensors"))
    vocab = emb.shape[0]
    (adir / "added_tokens.json").write_text(json.dumps({t: vocab + i for i, t in enumerate(NEW)}, indent=2) + "\n")
    # The reference: the base resized, the rows written in, the LoRA on top.
    ref = mf.load_model(model_dir)
    ref.resize_token_embeddings(vocab + 4)
    with torch.no_grad():
        ref.model.embed_tokens.weight[vocab:] = inp
        if not tied:
            ref.lm_head.weight[vocab:] = out
    mf.check(tied == (ref.lm_head.weight.data_ptr() == ref.model.embed_tokens.weight.data_ptr()),
             "resize_token_embeddings changed the tying")
    stats["vocab_added"] = {"layout": "vllm_added_tokens", "tied_after_resize": tied}
    return PeftModel.from_pretrained(ref, str(adir), is_trainable=False).eval()


def build_mts(model_dir, tied, gen, stats):
    adir = model_dir / "adapters" / "vocab_mts"
    base = mf.load_model(model_dir)
    vocab = base.config.vocab_size
    base.resize_token_embeddings(vocab + 4)
    pm = get_peft_model(base, lora_cfg(modules_to_save=["embed_tokens", "lm_head"])).eval()
    init_lora(pm, gen)
    inner = pm.base_model.model
    emb = inner.model.embed_tokens.modules_to_save["default"].weight
    head = inner.lm_head.modules_to_save["default"].weight
    with torch.no_grad():
        emb[vocab:] = rows_like(emb[:vocab], 4, gen, 1.0)
        head[vocab:] = rows_like(head[:vocab], 4, gen, 3.0)
        for w in (emb, head):
            ids = torch.randperm(vocab, generator=gen)[:20]
            w[ids] += rows_like(w[:vocab], 20, gen, 0.5)
    stats["vocab_mts"] = {"layout": "modules_to_save",
                          "copies_tied": bool(emb.data_ptr() == head.data_ptr())}
    pm.save_pretrained(str(adir))
    clean_adapter_dir(adir)
    names = sorted(load_file(str(adir / "adapter_model.safetensors")))
    want = {"base_model.model.model.embed_tokens.weight", "base_model.model.lm_head.weight"}
    mf.check(want <= set(names), f"modules_to_save saved {[n for n in names if 'lora' not in n]}, wanted {sorted(want)}")
    (adir / "added_tokens.json").write_text(json.dumps({t: vocab + i for i, t in enumerate(NEW)}, indent=2) + "\n")
    bdir = model_dir / "adapters" / "vocab_mts_bin"
    shutil.copytree(adir, bdir)
    state = load_file(str(bdir / "adapter_model.safetensors"))
    torch.save({k: v.contiguous() for k, v in state.items()}, str(bdir / "adapter_model.bin"))
    (bdir / "adapter_model.safetensors").unlink()

    def load(d):
        m = mf.load_model(model_dir)
        m.resize_token_embeddings(vocab + 4)
        return PeftModel.from_pretrained(m, str(d), is_trainable=False).eval()
    ref, ref_bin = load(adir), load(bdir)
    probe = [1, vocab, 5, vocab + 2, 9]
    diff = float((mf.forward_logits(ref, probe) - mf.forward_logits(ref_bin, probe)).abs().max())
    mf.check(diff == 0.0, f"the .bin twin differs from the safetensors adapter by {diff}")
    return ref


def build_tt(model_dir, tied, gen, stats):
    adir = model_dir / "adapters" / "vocab_tt"
    lm_ids = [19, 64, 200]
    tti = TT_IDS if tied else {"embed_tokens": TT_IDS, "lm_head": lm_ids}
    try:
        pm = get_peft_model(mf.load_model(model_dir), lora_cfg(trainable_token_indices=tti)).eval()
    except Exception as e:  # noqa: BLE001 - older PEFT: embed_tokens only
        mf.warn(f"trainable_token_indices {tti} refused ({e}); using the list form")
        tti = TT_IDS
        pm = get_peft_model(mf.load_model(model_dir), lora_cfg(trainable_token_indices=tti)).eval()
    init_lora(pm, gen)
    deltas = {n: p for n, p in pm.named_parameters() if "trainable_tokens_delta" in n}
    mf.check(deltas, f"no trainable_tokens_delta parameter: {[n for n, _ in pm.named_parameters()][:8]}")
    with torch.no_grad():
        for n, p in deltas.items():
            p += rows_like(p, p.shape[0], gen, 0.5 if "embed" in n else 1.5)
    pm.save_pretrained(str(adir))
    clean_adapter_dir(adir)
    names = [n for n in load_file(str(adir / "adapter_model.safetensors")) if "lora" not in n]
    mf.check(any("embed_tokens.token_adapter.trainable_tokens_delta" in n for n in names),
             f"trainable tokens saved as {names}")
    ref = PeftModel.from_pretrained(mf.load_model(model_dir), str(adir), is_trainable=False).eval()
    stats["vocab_tt"] = {"layout": "trainable_tokens", "token_indices": tti, "saved": names}
    return ref


def requests_for(vocab, rng):
    def p(n):
        return [rng.randrange(3, vocab) for _ in range(n)]
    new = list(range(vocab, vocab + 4))
    plan = [
        (p(5), None), ([1] + [new[0]] + p(4) + [new[1]] + p(3) + [new[2]], "vocab_added"),
        (p(17), "vocab_added"), ([new[2]], "vocab_added"), (p(1), None),
        (p(3) + [new[0], new[3]] + p(8), "vocab_mts"), (p(40), "vocab_mts"), ([new[1]], "vocab_mts"),
        (p(2) + [new[0]] + p(6) + [new[1]], "vocab_mts_bin"), (p(17), "vocab_mts_bin"),
        ([TT_IDS[0], 5, TT_IDS[3], 9, TT_IDS[1]], "vocab_tt"), (p(17) + [TT_IDS[4]], "vocab_tt"),
        ([TT_IDS[2]], "vocab_tt"), (p(40), None),
    ]
    shared = p(17)
    plan += [(shared, None), (shared + [new[0]], "vocab_added"), (shared + [TT_IDS[3]], "vocab_tt")]
    return [{"id": f"v{i + 1:02d}", "prompt_token_ids": pr, "lora": lo, "max_tokens": mf.MAX_TOKENS,
             "temperature": 0.0, "logprobs": 3, "prompt_logprobs": 3, "ignore_eos": True}
            for i, (pr, lo) in enumerate(plan)]


def build(name, src, out):
    mf.log(f"=== {name} (base of {src})")
    src_dir = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / src
    model_dir = out / name
    copy_base(src_dir, model_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    tied, vocab = bool(cfg.get("tie_word_embeddings")), cfg["vocab_size"]
    gen = torch.Generator().manual_seed(7000 + len(name))
    torch.manual_seed(7000 + len(name))
    stats = {"versions": mf.versions(), "base": src, "tied": tied, "adapters": {}}
    runners = {None: mf.load_model(model_dir),
               "vocab_added": build_added(model_dir, tied, gen, stats["adapters"]),
               "vocab_mts": build_mts(model_dir, tied, gen, stats["adapters"]),
               "vocab_tt": build_tt(model_dir, tied, gen, stats["adapters"])}
    runners["vocab_mts_bin"] = runners["vocab_mts"]
    requests = requests_for(vocab, random.Random(len(name)))
    expected, new_generated = [], {}
    for req in requests:
        res = mf.run_greedy(runners[req["lora"]], req["prompt_token_ids"], req["max_tokens"])
        base_tokens = None
        if req["lora"] is not None and max(req["prompt_token_ids"]) < vocab:
            base_tokens = mf.run_greedy(runners[None], req["prompt_token_ids"], req["max_tokens"],
                                        with_prompt=False)["token_ids"]
        if req["lora"] is None:
            mf.check(max(res["token_ids"]) < vocab, f"{req['id']}: the base model generated a new id")
        special = set(range(vocab, vocab + 4)) | set(TT_IDS)
        new_generated.setdefault(req["lora"] or "base", []).append(sum(t in special for t in res["token_ids"]))
        expected.append({"id": req["id"], "lora": req["lora"], "prompt_len": len(req["prompt_token_ids"]), **res,
                         "base_token_ids": base_tokens})
    mf.write_jsonl(model_dir / "requests.jsonl", requests)
    mf.write_jsonl(model_dir / "expected.jsonl", expected)
    stats["new_or_retrained_ids_generated"] = new_generated
    for a in ("vocab_added", "vocab_mts"):
        if sum(new_generated.get(a, [])) == 0:
            mf.warn(f"{name}/{a}: no request generated a new token")
    layouts = {"vocab_added": ("vllm_added_tokens", 4, "safetensors"), "vocab_mts": ("modules_to_save", 4, "safetensors"),
               "vocab_mts_bin": ("modules_to_save", 4, "bin"), "vocab_tt": ("trainable_tokens", 0, "safetensors")}
    manifest = {"model": name, "architecture": cfg["architectures"][0], "storage_dtype": cfg.get("dtype", cfg.get("torch_dtype")),
                "max_lora_rank": 8, "num_requests": len(requests),
                "adapters": [{"name": a, "path": f"adapters/{a}", "dtype": "float32", "max_rank": 8,
                              "num_modules": 7 * cfg["num_hidden_layers"], "layout": lay, "new_tokens": nt,
                              "weights": wt} for a, (lay, nt, wt) in layouts.items()]}
    (model_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    stats["warnings"] = mf.WARNINGS
    (model_dir / "stats.json").write_text(json.dumps(stats, indent=2, default=str) + "\n")
    mf.log(f"  {len(requests)} requests; new/retrained ids generated: "
           + ", ".join(f"{k} {sum(v)}" for k, v in new_generated.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--models", nargs="*", default=[b[0] for b in BASES])
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, src in BASES:
        if name in args.models:
            build(name, src, out)
    for w in mf.WARNINGS:
        mf.log(f"  warning: {w}")


if __name__ == "__main__":
    main()
