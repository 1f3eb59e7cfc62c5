"""Writes models/demo/MODEL_CARD.md for the demo model from what tools/train_demo.py measured
(the record also saved as train_metrics.json) and the corpus' SOURCES.md."""
import json
import os

import demo_data as dd
from demo_tokenizer import SPLIT_PATTERN as SPLIT


def _mib(n):
    return f"{n / 2**20:.2f} MiB"


def write(path, rec, data_dir):
    a, m, b = rec["args"], rec["metrics"], rec["base"]
    sources_path = os.path.join(data_dir, "SOURCES.md")
    sources = open(sources_path).read().split("\n", 2)[-1].strip() if os.path.exists(sources_path) \
        else "(SOURCES.md missing)"
    cell = lambda t: "`" + json.dumps(t)[1:-1].replace("|", "\\|").replace("`", "'") + "`"
    demo = "\n".join(f"| {d['lora'] or '(base)'} | {cell(d['prompt'])} | {cell(d['text'])} |"
                     for d in rec["demo"])
    n_templates = len(dd.SINGLE + dd.COUNT + dd.DOUBLE + dd.DOUBLE_COUNT)
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"
    steps = ", ".join(f"{k}: {v['steps']} steps in {v['seconds']} s" for k, v in rec["adapters"].items())
    text = f"""# quiver demo model

A small Llama-architecture model with two LoRA adapters, trained from scratch by
`tools/train_demo.py` so that quiver's multi-LoRA demo shows real behaviour, not random tokens:
the base model continues English like a fortune cookie file, `sql` answers text-to-SQL questions
in the format of vLLM's multi-LoRA example, and `pirate` rewrites a sentence in pirate speak.

## Files

| path | what | size |
|---|---|---|
| `base/` | `config.json`, `generation_config.json`, `model.safetensors` (bf16), `tokenizer.json`, `tokenizer_config.json` | {_mib(rec['sizes_bytes']['base'])} |
| `adapters/sql/` | PEFT LoRA (`adapter_config.json`, `adapter_model.safetensors`, bf16) | {_mib(rec['sizes_bytes']['sql'])} |
| `adapters/pirate/` | PEFT LoRA, same shape | {_mib(rec['sizes_bytes']['pirate'])} |

Base: `LlamaForCausalLM`, {b['params'] / 1e6:.2f} M parameters, hidden {a['hidden']},
{a['layers']} layers, {a['heads']} attention heads of 64 dims (head_dim = hidden / heads),
{a['kv_heads']} KV heads (GQA), MLP {a['intermediate']}, vocabulary {a['vocab']} (padded to a
multiple of 64 in `config.json`), RoPE theta 10000 (written both as `rope_parameters` and as
top-level `rope_theta`), RMSNorm eps 1e-5, max_position_embeddings 512,
**`tie_word_embeddings: true`**: `model.safetensors` has no `lm_head.weight`; the output
projection is `model.embed_tokens.weight`. Weights are stored in bf16; the metrics below were
measured after loading them into float32.

Adapters: LoRA r={a['rank']}, lora_alpha={a['alpha']} (scale {a['alpha'] / a['rank']:g}), no dropout,
no bias, on all seven projections (q, k, v, o, gate, up, down) of every layer.

## Tokenizer and prompt format

Byte-level BPE trained with HF `tokenizers`: a Split pre-tokenizer (regex below, behaviour
`isolated`), then ByteLevel (no prefix space, no regex), ByteLevel decoder. The regex is the
Llama 3 one except that a letter run never takes the character before it, so a word is the
same tokens after a space, a quote or a parenthesis, and the space before a word is a token
of its own (`Ġ`): `lilongwe` is the same pieces in `for lilongwe airport` and in
`= 'lilongwe'`, which is what lets the `sql` adapter copy words it has never seen (with the
Llama 3 split it had to re-spell them, and most of a first run's misses were misspelled
copies). It costs about 45% more tokens on English prose. Regex: `{SPLIT}`. Special tokens `<|bos|>` (id 0), `<|eos|>` (1),
`<|pad|>` (2). The markers `[user]`, `[/user]`, `[assistant]`, `[/assistant]` are added tokens
that are *not* special: they survive `skip_special_tokens`, so the stop string
`[/assistant]` is seen in the decoded text. `add_bos_token: true` (the post-processor in
`tokenizer.json` prepends `<|bos|>`); the chat template starts with `{{{{ bos_token }}}}`, so
render it and encode with `add_special_tokens=False`, or encode plain prompts with it.
`generation_config.json` lists both `<|eos|>` and `[/assistant]` as end tokens.

```
[user] {{content}} [/user] [assistant] {{answer}} [/assistant]
```

SQL content: `{dd.SQL_INSTRUCTION}\\n\\n context: CREATE TABLE table_name_N (col VARCHAR, ...)\\n\\n question: ...`;
the answer is ` SELECT col FROM table_name_N WHERE col2 = 'value'` (also `COUNT(col)` and
`... AND col3 = 'value'`), then ` [/assistant]`. Pirate content: `{dd.PIRATE_REQUEST} <sentence>`,
answer ` Arr! <sentence with whole-word substitutions>`.

## Training data and licenses

{sources}

* Base model: all fortune files of `fortunes`/`fortunes-min` except `ascii-art`, `ethnic` and
  `men-women`; the Brown Corpus with tags removed; about 30% as many fortunes again served as chat
  answers (`[user] Tell me a fortune. [/user] [assistant] ...`) so the base model knows the
  markers; and copy documents (about {a.get('copy_fraction', 0):.0%} of that text again):
  random `wamerican` words of the `sql` training split said twice, `key is value` records
  recalled later, made-up short forms spelled out in lower case (`ABC means abc`), so that the
  small model learns to copy words it has rarely seen; no SQL, and no held-out word or acronym.
  {b['tokens']:,} tokens; 2% of the prose documents held out for validation.
* `sql`: {a['sql_examples']:,} generated questions from {n_templates} phrasings, many naming the
  column after the value as the canonical question does (`Name the ICAO for lilongwe airport`),
  others before it (`What is the ICAO for the airport lilongwe?`). Column names are `wamerican`
  words (3-9 letters) and acronym-like names (real ones such as icao, iata, nfl and the
  upper-case entries of `wamerican`, and made-up 2-4 letter ones), shown in questions upper-case
  for acronyms and as-is for words; values are one to three
  `wamerican` words (proper nouns lower-cased). Words, acronyms and table numbers are split
  (seed {a['seed']}) into disjoint training and held-out sets; `icao`, `airport`, `lilongwe` and
  table 74 are held out, so the canonical example is itself unseen.
* `pirate`: sentences from the Brown Corpus with at least two words the rewrite changes;
  200 held out.

## Training

```
tools/prepare_demo_data.sh            # dev machine: .demo_data/corpus/
bash tools/gpu/run_demo_training.sh   # GPU machine: python3 tools/train_demo.py --data .demo_data/corpus --out $OUT/demo
```

Device: {rec['device']}; {', '.join(f'{k} {v}' for k, v in rec['versions'].items())}.
Seed {a['seed']}. Pretraining: AdamW (0.9, 0.95), peak lr {a['lr']}, weight decay 0.1, warmup 100,
cosine to 10%, bf16 autocast, batch {a['batch']} x {a['seq']} tokens, {b['steps']} steps
({b.get('epochs', '?')} passes over the text, at most {a['pretrain_epochs']}: more memorise this
small corpus) in {b['seconds']} s (the step count is fixed after timing the first steps so that
the schedule fits {a['pretrain_seconds']} s). The validation loss on the held-out prose is
checked every 100 steps and the best weights are kept: those of step {b.get('kept_step', '?')},
validation loss {b['val_loss']} (at the last step: {b.get('final_val_loss', '?')}). Adapters:
frozen base loaded from the saved bf16 files, AdamW lr {a['adapter_lr']}, batch
{a['adapter_batch']}, warmup 50, cosine to 10%, loss (and logits) on answer tokens only;
{steps}. Whole run: {rec['wall_seconds']} s.

## Measured (HF transformers + PEFT, float32, greedy)

| what | exact match |
|---|---|
| `sql` on {m['sql_heldout']} held-out questions | {pct(m['sql_exact_match'])} (after strip: {pct(m['sql_exact_match_stripped'])}) |
| `sql` on the canonical question (`sql-000`) | {'yes' if m.get('sql_canonical_exact') else 'no'} |
| base model (no adapter) on the same questions | {pct(m['base_on_sql_exact_match'])} |
| `pirate` on {m['pirate_heldout']} held-out sentences | {pct(m['pirate_exact_match'])} |

PEFT mixed-adapter batch equals the one-adapter runs: {m['mixed_batch_matches_separate']}.

| adapter | prompt | greedy output (before the stop string) |
|---|---|---|
{demo}

## Fixtures

`tests/fixtures/demo_sql_heldout.jsonl`: {m['sql_heldout']} quiver `generate` requests
(`"lora": "sql"`, `max_tokens` 64, `temperature` 0, `stop: ["[/assistant]"]`); the prompt is
the rendered chat template without the BOS text (the tokenizer adds BOS). The first, `sql-000`,
is the canonical example. A base-model run reuses the file with `"lora": null`.
`tests/fixtures/demo_sql_expected.jsonl`: per id, `answer` is the correct text exactly as a
stop-string request returns it: everything before `[/assistant]`, with the leading space and
the trailing space kept (`" SELECT ... 'lilongwe' "`); compare byte for byte (or both
`strip()`ped, which the metrics above also report). `hf_sql` and `hf_base` are what HF produced
in float32 with and without the adapter.
"""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
