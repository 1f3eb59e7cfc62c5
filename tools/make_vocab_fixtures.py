#!/usr/bin/env python3
"""Builds the HF + PEFT references of adapters that change vocabulary rows.

Two fixtures in the format of tools/make_fixtures.py's (tests/fixtures/README.md), each a copy of
a base fixture's model files, a tokenizer trained here for its 512 ids, and adapters in the
layouts the engine reads (io/adapter_vocab.h, io/peft_adapter.h):
  llama_vocab   llama_gqa's base (untied lm_head, float32), a SentencePiece-style BPE tokenizer
                (Metaspace, BOS added) like Llama-2's
  qwen2_vocab   qwen2_tied's base (tied lm_head, float16), a byte-level BPE tokenizer like Qwen2's
with adapters
  vocab_added     vLLM's layout, as vLLM's sql-lora test adapter has it: LoRA + added_tokens.json +
                  new_embeddings.safetensors (4 new tokens; input_embeddings, and output_embeddings
                  on the untied base), weights in adapter_model.bin, a tokenizer_config.json with a
                  chat template and the added tokens but no tokenizer.json (that adapter ships
                  tokenizer.model, which quiver does not read: its tokenizer is the base's plus
                  the added tokens)
  vocab_mts       PEFT modules_to_save = [embed_tokens, lm_head] over a vocabulary resized by 4,
                  with its tokenizer (tokenizer.json with the 4 added tokens)
  vocab_mts_bin   the same adapter, its weights in torch.save's adapter_model.bin
  vocab_tt        PEFT trainable_token_indices (replacement rows of base ids); no tokenizer
  lora_emb        LoRA on embed_tokens (lora_embedding_A/B) and lm_head besides q/v
  lora_emb_bin    LoRA on embed_tokens, lm_head and o_proj with use_rslora, a rank_pattern and an
                  alpha_pattern on the vocabulary modules, weights in adapter_model.bin
  emb_resized     LoRA on embed_tokens and lm_head over a vocabulary resized by 4: PEFT saves the
                  resized base layers beside the LoRA (save_embedding_layers), with its tokenizer
The references are HF + PEFT in float32 on the CPU: vLLM's layout has no HF loader, so its
reference is the base resized with the new rows written in, the LoRA loaded on top.
Base requests share the file with adapter requests whose prompts hold the new or retrained ids,
as token ids and as text (encoded by the adapter's tokenizer in HF; the expected lines carry the
ids and the text of the output). tokenize_expected.jsonl holds HF's encodings, decodings and
chat renderings by each tokenizer.

Needs torch, transformers >= 5, peft: run it on the GPU machine from the repo root
  python3 tools/make_vocab_fixtures.py --out "$OUT/vfx" && tar czf "$OUT/vfx.tgz" -C "$OUT" vfx
and unpack the two folders into tests/fixtures. Deterministic: fixed seeds.
"""
import argparse
import json
import os
import random
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402
import torch  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

try:
    from transformers import PreTrainedTokenizerFast  # noqa: E402
except ImportError:  # transformers 5 without the alias
    from transformers import TokenizersBackend as PreTrainedTokenizerFast  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

NEW = ["[user]", "[/user]", "[assistant]", "[/assistant]"]
TT_IDS = [7, 19, 64, 300, 511]
# (fixture, base fixture, tokenizer kind)
BASES = [("llama_vocab", "llama_gqa", "metaspace"), ("qwen2_vocab", "qwen2_tied", "bytelevel")]
SPECIALS = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2: the bases' bos / eos ids
CHAT_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'user' %}[user] {{ m['content'] }} [/user]"
                 "{% else %} [assistant] {{ m['content'] }} [/assistant]{% endif %}{% endfor %}"
                 "{% if add_generation_prompt %} [assistant]{% endif %}")
CHATS = [[{"role": "user", "content": "Name the ICAO for lilongwe airport"}],
         [{"role": "user", "content": "How many tables?"}, {"role": "assistant", "content": "SELECT COUNT(*)"},
          {"role": "user", "content": "Which ones [user] start with a?"}]]
TOKENIZE_TEXTS = ["[user] Write a SQL query to answer the question [/user] [assistant]", "[user][/user]x[assistant]",
                  " [assistant] SELECT icao FROM table_name_74", "question: Name the ICAO for lilongwe airport",
                  "[/assistant]", "no new tokens here"]


def lora_cfg(**extra):
    kw = dict(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0, bias="none", init_lora_weights=False,
              task_type="CAUSAL_LM")
    kw.update(extra)
    return LoraConfig(**kw)


def layer_lora_modules(pm):
    """make_fixtures' init_lora input: the LoRA modules of the decoder layers (not lm_head)."""
    found = {}
    for name, m in pm.named_modules():
        lora_a = getattr(m, "lora_A", None)
        hit = re.search(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)$", name)
        if isinstance(lora_a, torch.nn.ModuleDict) and "default" in lora_a and hit:
            found[(int(hit.group(1)), hit.group(2))] = m
    return found


def init_lora(pm, gen):
    mf.init_lora(layer_lora_modules(pm), 0.3, gen)


def init_vocab_lora(pm, gen, rel=0.5):
    """Random LoRA weights for embed_tokens (lora_embedding_A [r, V], B [h, r]) and lm_head
    (lora_A [r, h], B [V, r]) with ||scaling * delta||_F = rel * ||W||_F. Returns their names."""
    names = []
    with torch.no_grad():
        for name, m in pm.named_modules():
            emb_a = getattr(m, "lora_embedding_A", None)
            lin_a = getattr(m, "lora_A", None)
            if emb_a is not None and "default" in emb_a:
                a, b = emb_a["default"], m.lora_embedding_B["default"]
            elif isinstance(lin_a, torch.nn.ModuleDict) and "default" in lin_a and name.endswith("lm_head"):
                a, b = lin_a["default"].weight, m.lora_B["default"].weight
            else:
                continue
            av = torch.randn(a.shape, generator=gen)
            bv = torch.randn(b.shape, generator=gen)
            delta = m.scaling["default"] * (bv @ av)
            bv *= rel * m.get_base_layer().weight.norm() / delta.norm()
            a.copy_(av)
            b.copy_(bv)
            names.append(name)
    return names


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


def corpus():
    """The text the tokenizers are trained on: the demo's held-out SQL prompts without the new
    tokens' spellings (add_tokens adds nothing the vocabulary already has)."""
    path = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "demo_sql_heldout.jsonl"
    lines = [json.loads(line)["prompt"] for line in path.read_text().splitlines() if line.strip()]
    for t in NEW:
        lines = [line.replace(t, " ") for line in lines]
    return lines


def train_tokenizer(model_dir, kind, vocab):
    """A BPE tokenizer of exactly `vocab` ids, saved with save_pretrained into model_dir and
    loaded back as users load it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    if kind == "metaspace":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
        tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
        trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS, limit_alphabet=100, show_progress=False)
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    mf.check(tok.get_vocab_size() == vocab, f"{kind} tokenizer has {tok.get_vocab_size()} ids, wanted {vocab}")
    mf.check([tok.token_to_id(t) for t in SPECIALS] == [0, 1, 2], "special tokens are not ids 0, 1, 2")
    if kind == "metaspace":  # Llama: BOS first
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", 1)])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    save_tokenizer(hf, model_dir)
    return PreTrainedTokenizerFast.from_pretrained(str(model_dir))


def save_tokenizer(tok, folder):
    """save_pretrained, with tokenizer_config.json naming the generic class: AutoTokenizer then
    runs what tokenizer.json says instead of a model class's own pipeline (transformers 5 maps
    model_type qwen2 to a class that adds <|endoftext|>), which is what quiver reads."""
    tok.save_pretrained(str(folder))
    path = folder / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def auto_tokenizer_agrees(folder, tok):
    """Whether AutoTokenizer on the folder encodes the test texts as `tok` does (recorded)."""
    auto = AutoTokenizer.from_pretrained(str(folder))
    same = all(auto(t)["input_ids"] == tok(t)["input_ids"] for t in TOKENIZE_TEXTS)
    if not same:
        mf.warn(f"{folder}: AutoTokenizer ({type(auto).__name__}) encodes differently from tokenizer.json")
    return {"class": type(auto).__name__, "same_ids": same}


def adapter_tokenizer(model_dir, adir, vocab, keep_json=True):
    """The base tokenizer with NEW added as HF's add_tokens adds them, a chat template that uses
    them, saved into the adapter folder. keep_json=False leaves the folder as vLLM's sql-lora
    adapter is: tokenizer_config.json and added_tokens.json, no tokenizer.json."""
    tok = PreTrainedTokenizerFast.from_pretrained(str(model_dir))
    added = tok.add_tokens(NEW)
    ids = tok.convert_tokens_to_ids(NEW)
    mf.check(added == len(NEW) and ids == list(range(vocab, vocab + len(NEW))),
             f"add_tokens added {added} of {NEW} as ids {ids} (len {len(tok)}), wanted ids from {vocab}")
    tok.chat_template = CHAT_TEMPLATE
    save_tokenizer(tok, adir)
    if not keep_json:
        (adir / "tokenizer.json").unlink()
    (adir / "added_tokens.json").write_text(json.dumps({t: vocab + i for i, t in enumerate(NEW)}, indent=2) + "\n")
    return tok


def to_bin(adir):
    """adapter_model.safetensors -> torch.save's adapter_model.bin, as older PEFT wrote it."""
    state = load_file(str(adir / "adapter_model.safetensors"))
    torch.save({k: v.contiguous() for k, v in state.items()}, str(adir / "adapter_model.bin"))
    (adir / "adapter_model.safetensors").unlink()


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
    to_bin(adir)
    tok = adapter_tokenizer(model_dir, adir, vocab, keep_json=False)
    # The reference: the base resized, the rows written in, the LoRA on top.
    ref = mf.load_model(model_dir)
    ref.resize_token_embeddings(vocab + 4)
    with torch.no_grad():
        ref.model.embed_tokens.weight[vocab:] = inp
        if not tied:
            ref.lm_head.weight[vocab:] = out
    mf.check(tied == (ref.lm_head.weight.data_ptr() == ref.model.embed_tokens.weight.data_ptr()),
             "resize_token_embeddings changed the tying")
    stats["vocab_added"] = {"layout": "vllm_added_tokens", "tied_after_resize": tied,
                            "files": sorted(f.name for f in adir.iterdir())}
    return PeftModel.from_pretrained(ref, str(adir), is_trainable=False).eval(), tok


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
    tok = adapter_tokenizer(model_dir, adir, vocab)
    stats["vocab_mts"]["auto_tokenizer"] = auto_tokenizer_agrees(adir, tok)
    bdir = model_dir / "adapters" / "vocab_mts_bin"
    shutil.copytree(adir, bdir)
    to_bin(bdir)

    def load(d):
        m = mf.load_model(model_dir)
        m.resize_token_embeddings(vocab + 4)
        return PeftModel.from_pretrained(m, str(d), is_trainable=False).eval()
    ref, ref_bin = load(adir), load(bdir)
    probe = [1, vocab, 5, vocab + 2, 9]
    diff = float((mf.forward_logits(ref, probe) - mf.forward_logits(ref_bin, probe)).abs().max())
    mf.check(diff == 0.0, f"the .bin twin differs from the safetensors adapter by {diff}")
    return ref, tok


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
    return ref, None


def build_lora_emb(model_dir, tied, gen, stats, name, as_bin, **cfg):
    """LoRA on embed_tokens / lm_head (and some projections); the base vocabulary."""
    adir = model_dir / "adapters" / name
    pm = get_peft_model(mf.load_model(model_dir), lora_cfg(**cfg)).eval()
    init_lora(pm, gen)
    vocab_modules = init_vocab_lora(pm, gen)
    mf.check(len(vocab_modules) == (1 if cfg.get("ensure_weight_tying") else 2) or len(vocab_modules) == 2,
             f"{name}: LoRA on {vocab_modules}, wanted embed_tokens and lm_head")
    pm.save_pretrained(str(adir))
    clean_adapter_dir(adir)
    saved = sorted(n for n in load_file(str(adir / "adapter_model.safetensors")) if "layers" not in n)
    if as_bin:
        to_bin(adir)
    scaling = {n: m.scaling["default"] for n, m in pm.named_modules() if n in vocab_modules}
    stats[name] = {"layout": "lora_embedding", "saved": saved, "scaling": scaling,
                   "config": {k: v for k, v in cfg.items() if k != "target_modules"}}
    return PeftModel.from_pretrained(mf.load_model(model_dir), str(adir), is_trainable=False).eval(), None


def build_emb_resized(model_dir, tied, gen, stats):
    """LoRA on embed_tokens and lm_head of a base resized by the 4 new tokens (rows written
    in): PEFT saves the resized layers as <module>.base_layer.weight beside the LoRA."""
    adir = model_dir / "adapters" / "emb_resized"
    base = mf.load_model(model_dir)
    vocab = base.config.vocab_size
    base.resize_token_embeddings(vocab + 4)
    with torch.no_grad():
        emb = base.model.embed_tokens.weight
        emb[vocab:] = rows_like(emb[:vocab], 4, gen, 1.0)
        if not tied:
            head = base.lm_head.weight
            head[vocab:] = rows_like(head[:vocab], 4, gen, 3.0)
    pm = get_peft_model(base, lora_cfg(target_modules=["q_proj", "v_proj", "embed_tokens", "lm_head"])).eval()
    init_lora(pm, gen)
    init_vocab_lora(pm, gen)
    pm.save_pretrained(str(adir), save_embedding_layers=True)
    clean_adapter_dir(adir)
    saved = sorted(n for n in load_file(str(adir / "adapter_model.safetensors")) if "layers" not in n)
    tok = adapter_tokenizer(model_dir, adir, vocab)
    stats["emb_resized"] = {"layout": "lora_embedding_resized", "saved": saved}
    ref = mf.load_model(model_dir)
    ref.resize_token_embeddings(vocab + 4)
    return PeftModel.from_pretrained(ref, str(adir), is_trainable=False).eval(), tok


TEXT_PLAN = [
    ("[user] Write a SQL query to answer the question based on the table schema. [/user] [assistant]", "vocab_added"),
    ("[user] Write a SQL query to answer the question based on the table schema. [/user] [assistant]", None),
    ("[user] question: Name the ICAO for lilongwe airport [/user][assistant]", "vocab_mts"),
    (" context: CREATE TABLE table_name_74 (icao VARCHAR) [user]", "vocab_mts_bin"),
    ("question: Name the ICAO for lilongwe airport", "vocab_tt"),
    ("[assistant] SELECT icao FROM table_name_74", "lora_emb"),
    ("Write a SQL query to answer the question", "lora_emb_bin"),
    ("[user] Which airport [/user] [assistant]", "emb_resized"),
    ("Write a SQL query to answer the question", None),
]


def requests_for(vocab, rng, adapters):
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
        (p(9), "lora_emb"), ([1] + p(30), "lora_emb"), (p(17), "lora_emb_bin"), (p(1), "lora_emb_bin"),
        (p(3) + [new[0]] + p(4) + [new[2]], "emb_resized"), ([new[3]], "emb_resized"), (p(12), "lora_emb_tied"),
    ]
    shared = p(17)
    plan += [(shared, None), (shared + [new[0]], "vocab_added"), (shared + [TT_IDS[3]], "vocab_tt"),
             (shared, "lora_emb")]
    plan += [(text, lo) for text, lo in TEXT_PLAN]
    reqs = []
    for pr, lo in plan:
        if lo is not None and lo not in adapters:
            continue
        req = {"id": f"v{len(reqs) + 1:02d}", "lora": lo, "max_tokens": mf.MAX_TOKENS, "temperature": 0.0,
               "logprobs": 3, "prompt_logprobs": 3, "ignore_eos": True}
        req["prompt" if isinstance(pr, str) else "prompt_token_ids"] = pr
        reqs.append(req)
    return reqs


def output_text(tok, prompt_ids, token_ids):
    """The output's text as an incremental detokenizer streams it: the decode of prompt +
    output past the decode of the prompt (skip_special_tokens, vLLM's default)."""
    whole = tok.decode(prompt_ids + token_ids, skip_special_tokens=True)
    head = tok.decode(prompt_ids, skip_special_tokens=True)
    mf.check(whole.startswith(head), f"decode of the prompt {prompt_ids} is not a prefix of the whole")
    return whole[len(head):]


def tokenize_expected(toks):
    """HF's encodings, decodings and chat renderings, per tokenizer (lora null: the base's)."""
    rows = []
    for lo, tok in toks.items():
        for text in TOKENIZE_TEXTS:
            ids = tok(text)["input_ids"]
            rows.append({"lora": lo, "text": text, "ids": ids,
                         "ids_no_special": tok(text, add_special_tokens=False)["input_ids"],
                         "decoded": tok.decode(ids, skip_special_tokens=True), "decoded_all": tok.decode(ids)})
        if tok.chat_template:
            for messages in CHATS:
                rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
                rows.append({"lora": lo, "messages": messages, "rendered": rendered,
                             "ids": tok(rendered, add_special_tokens=False)["input_ids"]})
    return rows


def build(name, src, kind, out):
    mf.log(f"=== {name} (base of {src}, {kind} tokenizer)")
    src_dir = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / src
    model_dir = out / name
    copy_base(src_dir, model_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    tied, vocab = bool(cfg.get("tie_word_embeddings")), cfg["vocab_size"]
    gen = torch.Generator().manual_seed(7000 + len(name))
    torch.manual_seed(7000 + len(name))
    stats = {"versions": mf.versions(), "base": src, "tied": tied, "tokenizer": kind, "adapters": {}}
    base_tok = train_tokenizer(model_dir, kind, vocab)
    stats["auto_tokenizer"] = auto_tokenizer_agrees(model_dir, base_tok)
    built = {None: (mf.load_model(model_dir), base_tok)}
    a = stats["adapters"]
    built["vocab_added"] = build_added(model_dir, tied, gen, a)
    built["vocab_mts"] = build_mts(model_dir, tied, gen, a)
    built["vocab_mts_bin"] = built["vocab_mts"]
    built["vocab_tt"] = build_tt(model_dir, tied, gen, a)
    built["lora_emb"] = build_lora_emb(model_dir, tied, gen, a, "lora_emb", False,
                                       target_modules=["q_proj", "v_proj", "embed_tokens", "lm_head"])
    built["lora_emb_bin"] = build_lora_emb(model_dir, tied, gen, a, "lora_emb_bin", True, r=8, lora_alpha=8,
                                           use_rslora=True, target_modules=["embed_tokens", "lm_head", "o_proj"],
                                           rank_pattern={"embed_tokens": 4}, alpha_pattern={"lm_head": 24})
    built["emb_resized"] = build_emb_resized(model_dir, tied, gen, a)
    if tied:
        try:  # PEFT >= 0.19: one LoRA for the tied embed_tokens / lm_head pair
            built["lora_emb_tied"] = build_lora_emb(model_dir, tied, gen, a, "lora_emb_tied", False,
                                                    target_modules=["q_proj", "embed_tokens", "lm_head"],
                                                    ensure_weight_tying=True)
        except Exception as e:  # noqa: BLE001
            mf.warn(f"{name}: ensure_weight_tying refused ({e}); no lora_emb_tied")
    toks = {lo: tok if tok is not None else base_tok for lo, (_, tok) in built.items()}
    requests = requests_for(vocab, random.Random(len(name)), built)
    expected, new_generated = [], {}
    for req in requests:
        runner, tok = built[req["lora"]][0], toks[req["lora"]]
        prompt = req.get("prompt_token_ids") or tok(req["prompt"])["input_ids"]
        res = mf.run_greedy(runner, prompt, req["max_tokens"])
        base_tokens = None
        if req["lora"] is not None and max(prompt) < vocab:
            base_tokens = mf.run_greedy(built[None][0], prompt, req["max_tokens"], with_prompt=False)["token_ids"]
        if req["lora"] is None:
            mf.check(max(res["token_ids"]) < vocab, f"{req['id']}: the base model generated a new id")
        special = set(range(vocab, vocab + 4)) | set(TT_IDS)
        new_generated.setdefault(req["lora"] or "base", []).append(sum(t in special for t in res["token_ids"]))
        line = {"id": req["id"], "lora": req["lora"], "prompt_len": len(prompt), **res, "base_token_ids": base_tokens}
        if "prompt" in req:
            line["prompt_token_ids"] = prompt
            line["text"] = output_text(tok, prompt, res["token_ids"])
        expected.append(line)
    mf.write_jsonl(model_dir / "requests.jsonl", requests)
    mf.write_jsonl(model_dir / "expected.jsonl", expected)
    mf.write_jsonl(model_dir / "tokenize_expected.jsonl",
                   tokenize_expected({lo: tok for lo, tok in toks.items() if lo in (None, "vocab_added", "vocab_mts")}))
    stats["new_or_retrained_ids_generated"] = new_generated
    for ad in ("vocab_added", "vocab_mts", "emb_resized"):
        if sum(new_generated.get(ad, [])) == 0:
            mf.warn(f"{name}/{ad}: no request generated a new token")
    layouts = {"vocab_added": ("vllm_added_tokens", 4, "bin", "base + added tokens"),
               "vocab_mts": ("modules_to_save", 4, "safetensors", "tokenizer.json"),
               "vocab_mts_bin": ("modules_to_save", 4, "bin", "tokenizer.json"),
               "vocab_tt": ("trainable_tokens", 0, "safetensors", None),
               "lora_emb": ("lora_embedding", 0, "safetensors", None),
               "lora_emb_bin": ("lora_embedding", 0, "bin", None),
               "emb_resized": ("lora_embedding_resized", 4, "safetensors", "tokenizer.json"),
               "lora_emb_tied": ("lora_embedding_tied", 0, "safetensors", None)}
    manifest = {"model": name, "architecture": cfg["architectures"][0], "storage_dtype": cfg.get("dtype", cfg.get("torch_dtype")),
                "max_lora_rank": 8, "num_requests": len(requests), "tokenizer": kind,
                "adapters": [{"name": ad, "path": f"adapters/{ad}", "dtype": "float32", "max_rank": 8,
                              "layout": lay, "new_tokens": nt, "weights": wt, "tokenizer": tk}
                             for ad, (lay, nt, wt, tk) in layouts.items() if ad in built]}
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
    for name, src, kind in BASES:
        if name in args.models:
            build(name, src, kind, out)
    for w in mf.WARNINGS:
        mf.log(f"  warning: {w}")


if __name__ == "__main__":
    main()
