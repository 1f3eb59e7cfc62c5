#!/usr/bin/env python3
"""Per-adapter tokenizers through `quiver serve` (CTest: server_adapter_tokenizer).

Builds, in a scratch folder, a base model from tests/fixtures/llama_vocab (linked) with the
512-id tokenizers/llama512 tokenizer, and adapters over it whose folders bring tokenizer
files in both layouts: "own" (a tokenizer.json with the new tokens [user] [/user] [assistant]
[/assistant] at 512-515) and "hf" (vLLM's sql-lora layout: tokenizer_config.json with
added_tokens_decoder, special_tokens_map.json, tokenizer.model), plus "tt" (no tokenizer
files: the base's). Both tokenizer adapters have a chat template of their own. Then checks
/tokenize and /detokenize by model name, a completion with text holding the new tokens,
stop strings and logprob token text of generated new ids, chat with the adapter's template,
and that --chat-template overrides it. Last, the committed llama_vocab fixture as it is (its
own tokenizer, vocab_added laid out as vLLM's sql-lora adapter: adapter_model.bin,
added_tokens.json, new_embeddings.safetensors, tokenizer_config.json without tokenizer.json):
every text request of its requests.jsonl through /v1/completions by model name gives HF's
output text (expected.jsonl).

  python3 tests/server/adapter_tokenizer.py QUIVER_BINARY

Exits 0 when every check passes, 1 otherwise.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOCAB_MODEL = os.path.join(ROOT, "tests/fixtures/llama_vocab")
TOKENIZER = os.path.join(ROOT, "tests/fixtures/tokenizers/llama512")
NEW_TOKENS = ["[user]", "[/user]", "[assistant]", "[/assistant]"]
ADAPTER_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'user' %}[user] {{ m['content'] }} [/user]{% else %}"
                    "[assistant] {{ m['content'] }} [/assistant]{% endif %}{% endfor %}"
                    "{% if add_generation_prompt %} [assistant]{% endif %}")
TEXT = "[user] hello world [/user]"
# llama_vocab's request v02: on vocab_added, HF's greedy output starts 513 181 513.
NEW_ID_PROMPT = [1, 512, 402, 241, 234, 263, 513, 440, 303, 100, 514]
MESSAGES = [{"role": "user", "content": "list users"}]

failed = False


def check(ok, what, detail=""):
    global failed
    print(("ok   - " if ok else "FAIL - ") + what + ("" if ok else f": {detail}"), flush=True)
    failed = failed or not ok


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False)


def adapter(root, name, weights="vocab_added"):
    d = os.path.join(root, name)
    os.makedirs(d)
    src = os.path.join(VOCAB_MODEL, "adapters", weights)
    for f in os.listdir(src):
        os.symlink(os.path.join(src, f), os.path.join(d, f))
    return d


def new_tokens():
    return [{"id": 512 + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": True,
             "special": False} for i, t in enumerate(NEW_TOKENS)]


def build(root):
    base = os.path.join(root, "base")
    os.makedirs(base)
    for f in os.listdir(VOCAB_MODEL):
        if f in ("config.json", "generation_config.json") or "safetensors" in f:
            os.symlink(os.path.join(VOCAB_MODEL, f), os.path.join(base, f))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER, f), base)

    own = adapter(root, "own")
    tok = read_json(os.path.join(TOKENIZER, "tokenizer.json"))
    tok["added_tokens"] += new_tokens()
    write_json(os.path.join(own, "tokenizer.json"), tok)
    config = read_json(os.path.join(TOKENIZER, "tokenizer_config.json"))
    config["chat_template"] = ADAPTER_TEMPLATE
    write_json(os.path.join(own, "tokenizer_config.json"), config)

    hf = adapter(root, "hf")
    decoder = {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])}
    for t in new_tokens():
        decoder[str(t.pop("id"))] = t
    write_json(os.path.join(hf, "tokenizer_config.json"),
               {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                "unk_token": "<unk>", "added_tokens_decoder": decoder, "chat_template": ADAPTER_TEMPLATE})
    write_json(os.path.join(hf, "special_tokens_map.json"), {"bos_token": "<s>", "eos_token": "</s>"})
    with open(os.path.join(hf, "tokenizer.model"), "w") as f:
        f.write("a SentencePiece model quiver does not read")

    adapter(root, "tt", "vocab_tt")
    return base


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(quiver, base, root, extra, log_name, adapters=None):
    port = free_port()
    log = open(os.path.join(root, log_name), "w")
    adapters = adapters or {n: os.path.join(root, n) for n in ("own", "hf", "tt")}
    cmd = [quiver, "serve", "--port", str(port), "--model", base, "--served-model-name", "base", "--device", "cpu",
           "--max-lora-rank", "8", "--max-loras", str(len(adapters))]
    for name, path in adapters.items():
        cmd += ["--lora-modules", f"{name}={path}"]
    proc = subprocess.Popen(cmd + extra, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.1)
    proc.kill()
    log.close()
    with open(os.path.join(root, log_name)) as f:
        print(f.read())
    raise SystemExit("the server did not start")


def post(url, path, body):
    """(status, JSON body)."""
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def streamed_text(url, body):
    """The text deltas of a streamed completion, joined."""
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(dict(body, stream=True)).encode(),
                                 headers={"Content-Type": "application/json"})
    text = ""
    with urllib.request.urlopen(req, timeout=120) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                text += "".join(c.get("text", "") for c in json.loads(line[5:])["choices"])
    return text


def tokens(url, model, **body):
    status, r = post(url, "/tokenize", dict(body, model=model))
    return r.get("tokens") if status == 200 else f"HTTP {status}: {r}"


def run(url, override_url):
    base_ids = tokens(url, "base", prompt=TEXT)
    own_ids = tokens(url, "own", prompt=TEXT)
    check(isinstance(base_ids, list) and all(t < 512 for t in base_ids), "/tokenize base: base pieces", base_ids)
    check(isinstance(own_ids, list) and own_ids[:2] == [1, 512] and own_ids[-1] == 513,
          "/tokenize own: [user] and [/user] are 512 and 513", own_ids)
    check(tokens(url, "hf", prompt=TEXT) == own_ids, "/tokenize hf (added_tokens_decoder) as own", tokens(url, "hf", prompt=TEXT))
    check(tokens(url, "tt", prompt=TEXT) == base_ids, "/tokenize tt (no tokenizer files) as the base",
          tokens(url, "tt", prompt=TEXT))

    status, r = post(url, "/detokenize", {"model": "own", "tokens": [512, 513, 514, 515]})
    check(status == 200 and r.get("prompt") == "".join(NEW_TOKENS), "/detokenize own: the new tokens' text", r)
    status, r = post(url, "/detokenize", {"model": "base", "tokens": [512]})
    check(status == 400 and "[0, 512)" in r["error"]["message"], "/detokenize base: 512 is outside its vocabulary", r)

    status, r = post(url, "/v1/completions", {"model": "own", "prompt": TEXT, "max_tokens": 4, "temperature": 0})
    check(status == 200 and r["usage"]["prompt_tokens"] == len(own_ids),
          "completion with text on own: prompt tokenized with its tokenizer", r)

    for name in ("own", "hf"):
        status, r = post(url, "/v1/completions", {"model": name, "prompt": NEW_ID_PROMPT, "max_tokens": 3,
                                                  "temperature": 0, "logprobs": 1, "return_token_ids": True})
        ok = status == 200
        c = r["choices"][0] if ok else {}
        check(ok and c["token_ids"][0] == 513 and c["text"].startswith("[/user]") and c["text"].endswith("[/user]"),
              f"completion on {name}: generated new ids stream as their text", r)
        check(ok and c["logprobs"]["tokens"][0] == "[/user]", f"completion on {name}: logprob token text of 513", r)
        streamed = streamed_text(url, {"model": name, "prompt": NEW_ID_PROMPT, "max_tokens": 3, "temperature": 0})
        check(ok and streamed == c["text"], f"completion on {name}: the streamed text is the same", streamed)
        status, r = post(url, "/v1/completions", {"model": name, "prompt": NEW_ID_PROMPT, "max_tokens": 3,
                                                  "temperature": 0, "stop": ["[/user]"], "stream": False})
        c = r["choices"][0] if status == 200 else {}
        check(status == 200 and c["finish_reason"] == "stop" and c["text"] == "" and c.get("stop_reason") == "[/user]",
              f"completion on {name}: the stop string [/user] stops at the new id", r)

    own_chat = tokens(url, "own", messages=MESSAGES)
    base_chat = tokens(url, "base", messages=MESSAGES)
    check(isinstance(own_chat, list) and own_chat[0] == 512 and own_chat[-1] == 514,
          "/tokenize messages on own: its template with [user] ... [assistant]", own_chat)
    check(isinstance(base_chat, list) and base_chat[0] == 1 and all(t < 512 for t in base_chat),
          "/tokenize messages on base: the base's [INST] template", base_chat)
    status, r = post(url, "/v1/chat/completions", {"model": "own", "messages": MESSAGES, "max_tokens": 2,
                                                   "temperature": 0})
    check(status == 200 and r["usage"]["prompt_tokens"] == len(own_chat),
          "chat on own renders with its template", r)
    status, r = post(url, "/v1/chat/completions", {"model": "hf", "messages": MESSAGES, "max_tokens": 2})
    check(status == 200 and r["usage"]["prompt_tokens"] == len(own_chat), "chat on hf renders with its template", r)

    # --chat-template "{{ messages[0]['content'] }} [assistant]" overrides every model's.
    over_own = tokens(override_url, "own", messages=MESSAGES)
    over_base = tokens(override_url, "base", messages=MESSAGES)
    check(isinstance(over_own, list) and over_own[-1] == 514 and 512 not in over_own,
          "--chat-template overrides the adapter's template (own's tokenizer still reads it)", over_own)
    check(isinstance(over_base, list) and 514 not in over_base, "--chat-template on base, base tokenizer", over_base)


def seed_layout(url):
    """The fixture's text requests by model name against HF's output text."""
    expected = {}
    with open(os.path.join(VOCAB_MODEL, "expected.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            expected[e["id"]] = e
    checked = 0
    with open(os.path.join(VOCAB_MODEL, "requests.jsonl")) as f:
        for line in f:
            req = json.loads(line)
            if "prompt" not in req:
                continue
            body = {"model": req["lora"] or "base", "prompt": req["prompt"], "max_tokens": req["max_tokens"],
                    "temperature": 0, "ignore_eos": True}
            status, r = post(url, "/v1/completions", body)
            text = r["choices"][0]["text"] if status == 200 else f"HTTP {status}: {r}"
            check(text == expected[req["id"]]["text"], f"seed layout: {req['id']} on {body['model']} gives HF's text",
                  f"{text!r} vs {expected[req['id']]['text']!r}")
            checked += 1
    check(checked >= 8, "seed layout: the fixture's text requests", checked)


def main():
    quiver = os.path.realpath(sys.argv[1])
    root = tempfile.mkdtemp(prefix="quiver_adapter_tokenizer_")
    procs = []
    try:
        base = build(root)
        proc, url = start(quiver, base, root, [], "a.log")
        procs.append(proc)
        proc, override_url = start(quiver, base, root,
                                   ["--chat-template", "{{ messages[0]['content'] }} [assistant]"], "b.log")
        procs.append(proc)
        run(url, override_url)
        adapters = {n: os.path.join(VOCAB_MODEL, "adapters", n)
                    for n in ("vocab_added", "vocab_mts", "vocab_mts_bin", "vocab_tt", "lora_emb", "lora_emb_bin", "emb_resized")}
        proc, seed_url = start(quiver, VOCAB_MODEL, root, [], "c.log", adapters)
        procs.append(proc)
        seed_layout(seed_url)
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(root, ignore_errors=True)
    print("adapter tokenizer server tests " + ("FAILED" if failed else "passed"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
