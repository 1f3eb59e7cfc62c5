#!/usr/bin/env python3
"""Trains quiver's demo model on one GPU in a few minutes, from text that Debian and npm ship
(tools/prepare_demo_data.sh collects it): a byte-level BPE tokenizer, a small Llama base model
pretrained on fortunes, the Brown Corpus and generated copy documents (tools/demo_data.py), and
two PEFT LoRA adapters on the frozen base: `sql` (text-to-SQL, vLLM's multi-LoRA example
format) and `pirate` (pirate speak).
Everything is then reloaded from the saved bf16 files in float32 and measured with HF greedy
decoding; tools/demo_report.py writes the held-out fixtures and the model card.

  python3 tools/train_demo.py --data .demo_data/corpus --out OUT
writes OUT/models/demo/{base,adapters/sql,adapters/pirate,MODEL_CARD.md,train_metrics.json}
and OUT/tests/fixtures/demo_sql_{heldout,expected}.jsonl, laid out like the repository.
Exit status: 0 ok, 3 when the sql adapter misses --min-sql-em (all files are still written).
"""
import argparse
import json
import math
import os
import random
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the GPU machine has no network: never wait on it
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import demo_data as dd  # noqa: E402
import demo_tokenizer  # noqa: E402

T0 = time.time()
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def log(msg):
    print(f"[{time.time() - T0:6.1f}s {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", required=True, help="corpus folder from tools/prepare_demo_data.sh")
    p.add_argument("--out", required=True, help="output root (gets models/ and tests/)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", default="cuda")
    for flag, default in (("--vocab", 6144), ("--hidden", 384), ("--layers", 5), ("--heads", 6),
                          ("--kv-heads", 2), ("--intermediate", 1024)):
        p.add_argument(flag, type=int, default=default)
    p.add_argument("--seq", type=int, default=256, help="pretraining sequence length")
    p.add_argument("--batch", type=int, default=128, help="pretraining batch (sequences)")
    p.add_argument("--lr", type=float, default=1.5e-3)
    p.add_argument("--pretrain-seconds", type=float, default=75)
    p.add_argument("--max-pretrain-steps", type=int, default=8000)
    p.add_argument("--pretrain-epochs", type=float, default=8,
                   help="passes over the corpus at most (it is small: 30 passes memorised it)")
    p.add_argument("--copy-fraction", type=float, default=0.3,
                   help="copy documents added to the pretraining text, as a fraction of it")
    p.add_argument("--wall-seconds", type=float, default=330,
                   help="cuts --sql-seconds short so that the whole run fits in this")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=int, default=32)
    p.add_argument("--adapter-lr", type=float, default=1.5e-3)
    p.add_argument("--adapter-batch", type=int, default=256)
    p.add_argument("--sql-seconds", type=float, default=150)
    p.add_argument("--sql-max-steps", type=int, default=5000)
    p.add_argument("--pirate-seconds", type=float, default=45)
    p.add_argument("--pirate-max-steps", type=int, default=800)
    p.add_argument("--sql-examples", type=int, default=150000)
    p.add_argument("--heldout", type=int, default=256)
    p.add_argument("--min-sql-em", type=float, default=0.9)
    return p.parse_args()


def lr_at(step, total, peak, warmup):
    warm = min(1.0, (step + 1) / warmup)
    progress = min(1.0, step / max(1, total))
    return peak * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train_loop(model, params, next_batch, batch_loss, seconds, max_steps, peak_lr, warmup,
               weight_decay, device, name, probe=None, every=200):
    """Runs until max_steps or `seconds`: the step count is fixed from the speed of the first
    steps so the cosine schedule ends where training does. batch_loss(x, y) runs the model;
    probe(step), called every `every` steps and at the end, adds to the progress lines."""
    import torch
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=peak_lr, betas=(0.9, 0.95),
                            fused=device == "cuda")
    model.train()
    total, calib_from, calib_to = max_steps, 10, 40
    start = time.time()
    running, seen = 0.0, 0
    step = 0
    while step < total:
        if step == calib_from or step == calib_to:
            if device == "cuda":
                torch.cuda.synchronize()
            if step == calib_from:
                t_calib = time.time()
            else:
                per_step = (time.time() - t_calib) / (calib_to - calib_from)
                left = seconds - (time.time() - start)
                total = max(calib_to + 1, min(max_steps, calib_to + int(left / per_step)))
                log(f"{name}: {per_step * 1e3:.1f} ms/step -> {total} steps")
        for group in opt.param_groups:
            group["lr"] = lr_at(step, total, peak_lr, warmup)
        x, y = next_batch()
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = batch_loss(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        running += loss.detach()
        seen += 1
        step += 1
        if step % every == 0 or step == total:
            extra = probe(step) if probe else ""
            log(f"{name}: step {step}/{total} loss {float(running) / seen:.4f} "
                f"lr {opt.param_groups[0]['lr']:.2e}{extra}")
            running, seen = 0.0, 0
            model.train()
    model.eval()
    return {"steps": total, "seconds": round(time.time() - start, 1)}


def causal_lm_loss(logits, targets):
    import torch.nn.functional as F
    return F.cross_entropy(logits[:, :-1].float().flatten(0, 1), targets[:, 1:].flatten(),
                           ignore_index=-100)


def pretrain(args, tok, docs, val_docs, device):
    """Pretrains the base model; validation is prose the model never trains on. The weights with
    the lowest validation loss seen (every 100 steps and at the end) are the ones kept."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    ids = {t: tok.token_to_id(t) for t in [dd.BOS, dd.EOS, dd.PAD, dd.STOP]}
    stream = demo_tokenizer.token_stream(tok, docs)
    val_stream = demo_tokenizer.token_stream(tok, val_docs)
    train_data = torch.tensor(stream, dtype=torch.long, device=device)
    # Fixed, non-overlapping validation windows: the same text at every check.
    n_win = min(384, (len(val_stream) - 1) // (args.seq + 1))
    if n_win < 8:
        raise SystemExit(f"only {n_win} validation windows: the corpus is too small")
    val_windows = torch.tensor(val_stream[:n_win * (args.seq + 1)], dtype=torch.long,
                               device=device).view(n_win, args.seq + 1)
    log(f"pretraining tokens: {len(stream):,}; validation: {n_win} windows of {args.seq + 1} "
        f"tokens from {len(val_docs)} held-out prose documents")
    vocab = tok.get_vocab_size(with_added_tokens=True)
    config = LlamaConfig(
        vocab_size=((vocab + 63) // 64) * 64, hidden_size=args.hidden,
        intermediate_size=args.intermediate, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.hidden // args.heads, max_position_embeddings=512, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=True, hidden_act="silu", attention_bias=False, mlp_bias=False,
        initializer_range=0.02, bos_token_id=ids[dd.BOS], eos_token_id=ids[dd.EOS],
        pad_token_id=ids[dd.PAD])
    model = LlamaForCausalLM(config)
    tied = lambda: model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    if not tied():
        model.tie_weights()
    if not tied():
        raise SystemExit("lm_head is not tied to embed_tokens")
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"base model: {n_params / 1e6:.2f} M parameters (tied embeddings)")
    gen = torch.Generator(device=device).manual_seed(args.seed)
    offsets = torch.arange(args.seq + 1, device=device)

    def next_batch(source=train_data):
        start = torch.randint(0, source.numel() - args.seq - 1, (args.batch,), device=device,
                              generator=gen)
        x = source[start[:, None] + offsets]
        return x, x
    def val_loss():
        model.eval()
        total = 0.0
        with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
            for i in range(0, n_win, args.batch):
                x = val_windows[i:i + args.batch]
                logits = model(input_ids=x, use_cache=False).logits
                total += float(causal_lm_loss(logits, x)) * len(x)
        return total / n_win
    best = {"val": float("inf"), "step": 0, "state": None}

    def probe(step):
        v = val_loss()
        if v < best["val"]:
            best.update(val=v, step=step,
                        state={k: t.detach().clone() for k, t in model.state_dict().items()})
        return f" val {v:.4f}"
    params = [p for p in model.parameters() if p.requires_grad]
    epoch_steps = math.ceil(args.pretrain_epochs * train_data.numel() / (args.batch * args.seq))
    stats = train_loop(model, params, next_batch,
                       lambda x, y: causal_lm_loss(model(input_ids=x, use_cache=False).logits, y),
                       args.pretrain_seconds, min(args.max_pretrain_steps, epoch_steps), args.lr,
                       100, 0.1, device, "pretrain", probe=probe, every=100)
    stats["final_val_loss"] = round(val_loss(), 4)
    stats["kept_step"] = stats["steps"]
    if best["state"] is not None and best["val"] < stats["final_val_loss"] - 0.005:
        model.load_state_dict(best["state"])
        if not tied():
            raise SystemExit("lm_head came untied when the best weights were restored")
        stats["kept_step"] = best["step"]
        log(f"restored the weights of step {best['step']} (validation {best['val']:.4f} < "
            f"{stats['final_val_loss']:.4f} at the end)")
    stats["val_loss"] = round(val_loss(), 4)
    stats["epochs"] = round(stats["steps"] * args.batch * args.seq / train_data.numel(), 2)
    stats["params"] = n_params
    stats["tokens"] = len(stream)
    log(f"pretraining done: validation loss {stats['val_loss']}")
    model.generation_config = GenerationConfig(
        bos_token_id=ids[dd.BOS], eos_token_id=[ids[dd.EOS], ids[dd.STOP]],
        pad_token_id=ids[dd.PAD])
    return model, stats


def save_base(model, base_dir):
    import torch
    model.to(torch.bfloat16).save_pretrained(base_dir)
    path = os.path.join(base_dir, "config.json")
    original = open(path).read()
    cfg = json.loads(original)
    # Older readers of Llama configs look for these top-level keys; transformers 5 nests
    # rope_theta in rope_parameters and writes `dtype`. Both spellings agree.
    rope = cfg.get("rope_parameters") or {}
    cfg.setdefault("rope_theta", rope.get("rope_theta", 10000.0))
    cfg.setdefault("torch_dtype", "bfloat16")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    try:
        from transformers import AutoConfig
        back = AutoConfig.from_pretrained(base_dir)
        theta = (getattr(back, "rope_parameters", None) or {}).get("rope_theta",
                                                                   getattr(back, "rope_theta", None))
        assert float(theta) == float(cfg["rope_theta"]), theta
    except Exception as e:  # keep what transformers wrote rather than a config it cannot read
        log(f"WARNING: extra config keys rejected ({e!r}); keeping transformers' config.json")
        with open(path, "w") as f:
            f.write(original)
    from safetensors import safe_open
    with safe_open(os.path.join(base_dir, "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        dtypes = {str(f.get_slice(k).get_dtype()) for k in keys}
    log(f"saved base: {len(keys)} tensors, dtypes {sorted(dtypes)}, "
        f"lm_head stored: {'lm_head.weight' in keys}")


def tokenize_pairs(tok, pairs, max_len, device):
    """pairs: (prompt text, answer text) -> ids and labels [N, L], answer tokens only labelled."""
    import numpy as np
    import torch
    bos, eos, pad = (tok.token_to_id(t) for t in (dd.BOS, dd.EOS, dd.PAD))
    prompts = tok.encode_batch([p for p, _ in pairs], add_special_tokens=False)
    answers = tok.encode_batch([a for _, a in pairs], add_special_tokens=False)
    rows = []
    for p, a in zip(prompts, answers):
        seq = [bos] + p.ids + a.ids + [eos]
        if len(seq) <= max_len:
            rows.append((seq, 1 + len(p.ids)))
    width = max(len(s) for s, _ in rows)
    ids = np.full((len(rows), width), pad, dtype=np.int64)
    labels = np.full((len(rows), width), -100, dtype=np.int64)
    for i, (seq, n_prompt) in enumerate(rows):
        ids[i, :len(seq)] = seq
        labels[i, n_prompt:len(seq)] = seq[n_prompt:]
    mean = sum(len(s) for s, _ in rows) / len(rows)
    log(f"{len(rows)} of {len(pairs)} examples fit in {max_len} tokens; mean {mean:.0f}, "
        f"padded to {width}")
    return torch.from_numpy(ids).to(device), torch.from_numpy(labels).to(device)


def train_adapter(args, tok, base_dir, out_dir, name, pairs, seconds, max_steps, device):
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file, save_file
    from transformers import LlamaForCausalLM
    # Train against the shipped (bf16-rounded) weights, not the in-memory float32 ones.
    base = LlamaForCausalLM.from_pretrained(base_dir, dtype=torch.float32).to(device)
    config = LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=0.0, bias="none",
                        target_modules=LORA_TARGETS, task_type="CAUSAL_LM")
    model = get_peft_model(base, config)
    params = [p for p in model.parameters() if p.requires_grad]
    log(f"{name}: {sum(p.numel() for p in params):,} trainable LoRA parameters")
    ids, labels = tokenize_pairs(tok, pairs, 320, device)
    gen = torch.Generator(device=device).manual_seed(args.seed + len(name))
    inner = model.get_base_model()  # the LlamaForCausalLM, with the LoRA layers in it

    def next_batch():
        idx = torch.randint(0, ids.shape[0], (args.adapter_batch,), device=device, generator=gen)
        return ids[idx], labels[idx]

    def answer_loss(x, y):
        """Causal LM loss on the answer tokens, computing logits only where they are needed:
        most of each row is prompt, and the vocabulary projection is the largest matmul."""
        import torch.nn.functional as F
        hidden = inner.model(input_ids=x, use_cache=False).last_hidden_state  # [B, L, H]
        keep = y[:, 1:] != -100                                               # [B, L-1]
        logits = inner.lm_head(hidden[:, :-1][keep])                          # [N, V]
        return F.cross_entropy(logits.float(), y[:, 1:][keep])
    stats = train_loop(model, params, next_batch, answer_loss, seconds, max_steps,
                       args.adapter_lr, 50, 0.0, device, name)
    model.save_pretrained(out_dir)
    weights = os.path.join(out_dir, "adapter_model.safetensors")
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in load_file(weights).items()}
    save_file(tensors, weights, metadata={"format": "pt"})
    cfg_path = os.path.join(out_dir, "adapter_config.json")
    cfg = json.load(open(cfg_path))
    cfg["base_model_name_or_path"] = "models/demo/base"  # not the GPU machine's temp path
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    readme = os.path.join(out_dir, "README.md")  # PEFT's generic card; MODEL_CARD.md covers it
    if os.path.exists(readme):
        os.remove(readme)
    log(f"saved adapter {name}: {len(tensors)} tensors (bf16)")
    del model, base
    if device == "cuda":
        torch.cuda.empty_cache()
    return stats


def main():
    args = parse_args()
    import torch
    import peft
    import safetensors
    import tokenizers
    import transformers
    log(f"python {sys.version.split()[0]} torch {torch.__version__} transformers "
        f"{transformers.__version__} peft {peft.__version__} tokenizers {tokenizers.__version__} "
        f"safetensors {safetensors.__version__}")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("CUDA is not available (use --device cpu for a slow smoke run)")
        log(f"device: {torch.cuda.get_device_name(0)}")
    # Reference outputs are measured in true float32, not TF32.
    torch.set_float32_matmul_precision("highest")
    random.seed(args.seed)
    torch.manual_seed(args.seed)

    fortunes, brown, words = dd.load_corpus(args.data)
    sql_train, sql_test = dd.make_sql_splits(words, args.seed)
    docs, val_docs = dd.pretrain_documents(fortunes, brown, args.seed, split=sql_train,
                                           copy_fraction=args.copy_fraction)
    rng = random.Random(args.seed)
    sql_train_ex = [dd.sql_example(rng, sql_train) for _ in range(args.sql_examples)]
    pirate_train, pirate_test = dd.pirate_sentences(brown, args.seed)
    log(f"corpus: {len(fortunes)} fortunes, {len(brown)} Brown paragraphs, {len(words)} words; "
        f"{len(docs)} pretraining documents ({sum(map(len, docs)) / 1e6:.1f} M chars), "
        f"{len(val_docs)} held out")

    models_dir = os.path.join(args.out, "models", "demo")
    base_dir = os.path.join(models_dir, "base")
    # Task text joins the tokenizer's training text (not the base model's), so SQL keywords
    # and table names get tokens of their own; markers are added tokens, not learned merges.
    tok_texts = docs + [ex["content"] + " " + ex["sql"] for ex in sql_train_ex[:20000]]
    tok_texts += [dd.pirate(s) for s in pirate_train]
    for m in dd.MARKERS:
        tok_texts = [t.replace(m, "") for t in tok_texts]
    tok = demo_tokenizer.build_tokenizer(tok_texts, args.vocab)
    log(f"tokenizer: {tok.get_vocab_size(with_added_tokens=True)} tokens")
    demo_tokenizer.save_tokenizer(tok, base_dir)
    hf_tok = demo_tokenizer.check_hf_tokenizer(tok, base_dir,
                                               dd.canonical_sql_example()["content"], log)

    model, base_stats = pretrain(args, tok, docs, val_docs, args.device)
    save_base(model, base_dir)
    del model
    if args.device == "cuda":
        torch.cuda.empty_cache()

    adapters_dir = os.path.join(models_dir, "adapters")
    sql_pairs = [(dd.chat_prompt(e["content"]), dd.chat_answer(e["sql"])) for e in sql_train_ex]
    pirate_pairs = [(dd.chat_prompt(dd.pirate_content(s)), dd.chat_answer(dd.pirate(s)))
                    for s in pirate_train]
    # Left for the sql adapter: the pirate adapter and the evaluation take about a minute more.
    sql_seconds = max(30.0, min(args.sql_seconds, args.wall_seconds - (time.time() - T0)
                                - args.pirate_seconds - 45))
    adapter_stats = {
        "sql": train_adapter(args, tok, base_dir, os.path.join(adapters_dir, "sql"), "sql",
                             sql_pairs, sql_seconds, args.sql_max_steps, args.device),
        "pirate": train_adapter(args, tok, base_dir, os.path.join(adapters_dir, "pirate"),
                                "pirate", pirate_pairs, args.pirate_seconds,
                                args.pirate_max_steps, args.device),
    }

    import demo_report
    ok = demo_report.evaluate_and_report(
        args=args, hf_tok=hf_tok, models_dir=models_dir, sql_test=sql_test,
        pirate_test=pirate_test, base_stats=base_stats, adapter_stats=adapter_stats,
        log=log, started=T0)
    log("done" if ok else f"FAILED: sql exact match below {args.min_sql_em}")
    sys.exit(0 if ok else 3)


if __name__ == "__main__":
    main()
