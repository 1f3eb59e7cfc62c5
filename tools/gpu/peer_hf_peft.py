#!/usr/bin/env python3
"""Run THERE (one H200): the decode benchmark's peer, Hugging Face transformers + PEFT on the
same shape quiver's bench uses (bench/configs/llama-2-7b, bf16, random weights), eager,
dynamic KV cache. For each batch size: a prompt of --input-len random tokens per request,
then --steps decode steps of one token per request, each step timed alone (CUDA events
around a synchronised forward); the base model first, then the same model wrapped by PEFT
with one r=--rank adapter on all 7 projections per request (PEFT's mixed-batch forward,
adapter_names, every request on its own adapter). Prints one line per run and writes
--json: per batch the decode step p50 / mean in ms for base and LoRA.

Usage: python3 tools/gpu/peer_hf_peft.py --config bench/configs/llama-2-7b --batches 1,8,32,64 --json OUT.json
"""
import argparse
import json
import statistics
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def decode_times(model, batch, input_len, steps, vocab, adapter_names=None):
    """Per-step decode times (ms) after a prefill of batch x input_len random tokens."""
    gen = torch.Generator(device="cuda").manual_seed(batch)
    ids = torch.randint(0, vocab, (batch, input_len), device="cuda", generator=gen)
    kwargs = {} if adapter_names is None else {"adapter_names": adapter_names}
    times = []
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True, **kwargs)
        past = out.past_key_values
        nxt = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
        for _ in range(steps):
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = model(input_ids=nxt, past_key_values=past, use_cache=True, **kwargs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
            past = out.past_key_values
            nxt = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
    return times


def summary(times, warmup):
    kept = times[warmup:]
    return {"p50_ms": statistics.median(kept), "mean_ms": statistics.fmean(kept), "steps": len(kept)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]

    t0 = time.time()
    config = AutoConfig.from_pretrained(args.config)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.eval()
    print(f"model built in {time.time() - t0:.1f} s", flush=True)
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "rank": args.rank,
              "input_len": args.input_len, "batches": {}}
    for b in batches:
        base = summary(decode_times(model, b, args.input_len, args.steps, config.vocab_size), args.warmup)
        result["batches"][str(b)] = {"base": base}
        print(f"b{b} base p50 {base['p50_ms']:.2f} ms", flush=True)

    # Adapters with random (non-zero) A and B, so nothing is skipped for being zero.
    lcfg = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, target_modules=TARGETS, lora_dropout=0.0,
                      init_lora_weights=False)
    t1 = time.time()
    with torch.device("cuda"):  # the adapters' random init on the GPU
        peft_model = get_peft_model(model, lcfg, adapter_name="a0")
        for i in range(1, max(batches)):
            peft_model.add_adapter(f"a{i}", lcfg)
    peft_model.to(torch.bfloat16)
    peft_model.eval()
    print(f"{max(batches)} adapters added in {time.time() - t1:.1f} s", flush=True)
    for b in batches:
        names = [f"a{i}" for i in range(b)]
        lora = summary(decode_times(peft_model, b, args.input_len, args.steps, config.vocab_size, names),
                       args.warmup)
        entry = result["batches"][str(b)]
        entry["lora"] = lora
        entry["lora_cost"] = lora["p50_ms"] / entry["base"]["p50_ms"] - 1.0
        print(f"b{b} PEFT, {b} adapters, p50 {lora['p50_ms']:.2f} ms (base {entry['base']['p50_ms']:.2f}): "
              f"+{100 * entry['lora_cost']:.1f}%, {1000 * b / lora['p50_ms']:.0f} tok/s", flush=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
