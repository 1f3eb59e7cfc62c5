"""Second half of tools/train_demo.py: reloads the saved demo model (bf16 files, run in float32),
measures it with Hugging Face greedy decoding, and writes the quiver test fixtures
(tests/fixtures/demo_sql_{heldout,expected}.jsonl), train_metrics.json and MODEL_CARD.md.

Expected text rule (the same as quiver's and vLLM's stop strings): a request stops at the first
"[/assistant]" and its text is everything generated before it, byte for byte. The answers
therefore keep the leading space and the trailing space the format puts around the query:
" SELECT icao FROM table_name_74 WHERE airport = 'lilongwe' ".
"""
import json
import os
import random
import sys
import time

import demo_data as dd

DEMO_PIRATE = "Hello my friend, are you ready for the treasure?"


def greedy(model, tok, prompts, max_new, device, batch=128):
    """Left-padded batched greedy decoding; returns the text before the first stop/eos token."""
    import torch
    pad = tok.pad_token_id
    stop_ids = [tok.eos_token_id, tok.convert_tokens_to_ids(dd.STOP)]
    texts = []
    for i in range(0, len(prompts), batch):
        enc = [tok(p)["input_ids"] for p in prompts[i:i + batch]]
        width = max(map(len, enc))
        ids = torch.full((len(enc), width), pad, dtype=torch.long)
        mask = torch.zeros((len(enc), width), dtype=torch.long)
        for r, e in enumerate(enc):
            ids[r, width - len(e):] = torch.tensor(e)
            mask[r, width - len(e):] = 1
        with torch.no_grad():
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                 max_new_tokens=max_new, do_sample=False,
                                 eos_token_id=stop_ids, pad_token_id=pad)
        for row in out[:, width:].tolist():
            kept = []
            for t in row:
                if t in stop_ids or t == pad:
                    break
                kept.append(t)
            text = tok.decode(kept, skip_special_tokens=False)
            texts.append(text.split(dd.STOP)[0])
    return texts


# A fixture request may generate this many tokens; every held-out answer with its stop token
# fits in SQL_FIT (the longest generated one is about 58 with the space-splitting tokenizer).
SQL_MAX_TOKENS, SQL_FIT = 64, 60
DEMO_MAX_TOKENS = 64  # the model card's examples


def heldout_sql(hf_tok, sql_test, n, seed, log):
    """The canonical vLLM example first, then generated held-out questions whose answer and
    stop token fit in SQL_FIT tokens."""
    rng = random.Random(seed + 1)
    items, seen, too_long = [], set(), 0
    candidates = [dd.canonical_sql_example()] + [dd.sql_example(rng, sql_test) for _ in range(4 * n)]
    for ex in candidates:
        prompt = dd.chat_prompt(ex["content"])
        answer = f" {ex['sql']} "
        if prompt in seen:
            continue
        if len(hf_tok(answer + dd.STOP, add_special_tokens=False)["input_ids"]) > SQL_FIT:
            too_long += 1
            continue
        seen.add(prompt)
        items.append({"id": f"sql-{len(items):03d}", "prompt": prompt, "answer": answer})
        if len(items) == n:
            break
    if len(items) < n:
        raise SystemExit(f"only {len(items)} held-out SQL questions fit the token budget")
    log(f"held-out sql: {n} questions ({too_long} skipped as longer than {SQL_FIT} tokens)")
    return items


def exact(outputs, answers):
    return sum(o == a for o, a in zip(outputs, answers)) / len(answers)


def write_jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def evaluate_and_report(args, hf_tok, models_dir, sql_test, pirate_test, base_stats,
                        adapter_stats, log, started):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    device = args.device
    base = AutoModelForCausalLM.from_pretrained(os.path.join(models_dir, "base"),
                                                dtype=torch.float32).to(device).eval()
    model = PeftModel.from_pretrained(base, os.path.join(models_dir, "adapters", "sql"),
                                      adapter_name="sql")
    model.load_adapter(os.path.join(models_dir, "adapters", "pirate"), adapter_name="pirate")
    model.to(torch.float32).eval()
    log("evaluating the saved files in float32 with HF greedy decoding")

    items = heldout_sql(hf_tok, sql_test, args.heldout, args.seed, log)
    prompts, answers = [it["prompt"] for it in items], [it["answer"] for it in items]
    model.set_adapter("sql")
    sql_out = greedy(model, hf_tok, prompts, SQL_MAX_TOKENS, device)
    with model.disable_adapter():
        base_out = greedy(model, hf_tok, prompts, SQL_MAX_TOKENS, device)
    pirate_prompts = [dd.chat_prompt(dd.pirate_content(s)) for s in pirate_test]
    pirate_answers = [f" {dd.pirate(s)} " for s in pirate_test]
    model.set_adapter("pirate")
    pirate_out = greedy(model, hf_tok, pirate_prompts, 112, device)
    metrics = {
        "sql_exact_match": exact(sql_out, answers),
        "sql_exact_match_stripped": exact([o.strip() for o in sql_out], [a.strip() for a in answers]),
        "base_on_sql_exact_match": exact(base_out, answers),
        "pirate_exact_match": exact(pirate_out, pirate_answers),
        "sql_canonical_exact": sql_out[0] == answers[0],
        "sql_heldout": len(items), "pirate_heldout": len(pirate_test),
    }
    log(f"metrics: {json.dumps(metrics)}")
    for i in range(3):
        log(f"  sql  {answers[i]!r}\n{' ' * 20}got  {sql_out[i]!r}\n{' ' * 20}base {base_out[i]!r}")
    misses = [(a, o) for a, o in zip(answers, sql_out) if a != o][:12]
    for a, o in misses:
        log(f"  sql miss: want {a!r} got {o!r}")

    canonical = prompts[0]
    demo = [("base", "A fool and his money"), ("base", dd.chat_prompt("Tell me a fortune.")),
            ("base", canonical), ("sql", canonical),
            ("pirate", dd.chat_prompt(dd.pirate_content(DEMO_PIRATE)))]
    demo_out = []
    for lora, prompt in demo:
        if lora == "base":
            with model.disable_adapter():
                text = greedy(model, hf_tok, [prompt], DEMO_MAX_TOKENS, device)[0]
        else:
            model.set_adapter(lora)
            text = greedy(model, hf_tok, [prompt], DEMO_MAX_TOKENS, device)[0]
        demo_out.append({"lora": None if lora == "base" else lora, "prompt": prompt, "text": text})
        log(f"  demo [{lora}] {prompt[-60:]!r}\n{' ' * 20}-> {text!r}")
    metrics["mixed_batch_matches_separate"] = mixed_batch_check(model, hf_tok, demo, demo_out,
                                                                device, log)

    root = os.path.dirname(os.path.dirname(models_dir))
    fixtures = os.path.join(root, "tests", "fixtures")
    write_jsonl(os.path.join(fixtures, "demo_sql_heldout.jsonl"), [
        {"id": it["id"], "prompt": it["prompt"], "lora": "sql", "max_tokens": SQL_MAX_TOKENS,
         "temperature": 0.0, "stop": [dd.STOP]} for it in items])
    write_jsonl(os.path.join(fixtures, "demo_sql_expected.jsonl"), [
        {"id": it["id"], "answer": it["answer"], "hf_sql": s, "hf_base": b}
        for it, s, b in zip(items, sql_out, base_out)])

    sizes = {"base": dir_bytes(os.path.join(models_dir, "base"))}
    for name in adapter_stats:
        sizes[name] = dir_bytes(os.path.join(models_dir, "adapters", name))
    sizes["total"] = sum(sizes.values())
    if sizes["total"] > 25 * 1024 * 1024:
        log(f"WARNING: models/demo is {sizes['total'] / 2**20:.1f} MiB (> 25 MiB)")
    import peft
    import tokenizers
    import transformers
    record = {
        "metrics": metrics, "base": base_stats, "adapters": adapter_stats, "sizes_bytes": sizes,
        "demo": demo_out, "args": vars(args),
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__, "peft": peft.__version__,
                     "tokenizers": tokenizers.__version__},
        "device": torch.cuda.get_device_name(0) if device == "cuda" else device,
        "wall_seconds": round(time.time() - started, 1),
    }
    with open(os.path.join(models_dir, "train_metrics.json"), "w") as f:
        json.dump(record, f, indent=2)
    import demo_card
    demo_card.write(os.path.join(models_dir, "MODEL_CARD.md"), record, args.data)
    log(f"wrote fixtures ({len(items)} questions), train_metrics.json, MODEL_CARD.md; "
        f"models/demo {sizes['total'] / 2**20:.1f} MiB")
    return metrics["sql_exact_match"] >= args.min_sql_em


def mixed_batch_check(model, tok, demo, demo_out, device, log):
    """PEFT's own mixed-adapter batch (adapter_names=...) should agree with one-adapter runs;
    quiver's batched LoRA is held to the same standard. Informational only."""
    try:
        import torch
        names = [("__base__" if lora == "base" else lora) for lora, _ in demo]
        enc = [tok(p)["input_ids"] for _, p in demo]
        width = max(map(len, enc))
        ids = torch.full((len(enc), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, e in enumerate(enc):
            ids[r, width - len(e):] = torch.tensor(e)
            mask[r, width - len(e):] = 1
        stop_ids = [tok.eos_token_id, tok.convert_tokens_to_ids(dd.STOP)]
        with torch.no_grad():
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                 max_new_tokens=DEMO_MAX_TOKENS, do_sample=False,
                                 eos_token_id=stop_ids, pad_token_id=tok.pad_token_id,
                                 adapter_names=names)
        same = 0
        for row, want in zip(out[:, width:].tolist(), demo_out):
            kept = []
            for t in row:
                if t in stop_ids or t == tok.pad_token_id:
                    break
                kept.append(t)
            same += tok.decode(kept).split(dd.STOP)[0] == want["text"]
        log(f"PEFT mixed batch (adapter_names): {same}/{len(demo)} rows equal the separate runs")
        return same == len(demo)
    except Exception as e:  # an older PEFT without adapter_names; not needed for the fixtures
        log(f"PEFT mixed batch not run: {e!r}")
        return None
