#!/usr/bin/env python3
"""The server path under load gives each request the tokens it gets alone.

Starts `quiver serve` on a free loopback port with the llama_gqa fixture (prompts of up to
1,024 positions, tools/invariance.py's long_model) and its adapters, with a small prefill
budget so that long prompts are chunked and interleaved with other requests' decodes.
Concurrent clients then stream greedy completions (token-id prompts of 64-600 tokens over
every adapter and the base model, return_token_ids). Afterwards every response must equal
`quiver generate` on the same request with --max-num-seqs 1 (each request alone) on the same
device: token ids and finish reason.

  python3 tools/server_invariance.py --quiver build/quiver --device cuda

Exit 0 when all match, 1 on any difference or error, 77 (ctest's skip) when this build has
no server or the device is missing.
"""
import argparse
import concurrent.futures
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import invariance  # noqa: E402

MODEL = "llama_gqa"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url, proc, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.2)
    return False


def stream_completion(url, model, req, timeout):
    """One streamed completion; returns (token_ids, finish_reason, error)."""
    body = {"model": model, "prompt": req["prompt_token_ids"], "max_tokens": req["max_tokens"], "temperature": 0,
            "ignore_eos": True, "return_token_ids": True, "stream": True}
    r = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                               headers={"Content-Type": "application/json"})
    tokens, finish = [], None
    try:
        with urllib.request.urlopen(r, timeout=timeout) as resp:
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    return tokens, finish, json.dumps(chunk["error"])
                for c in chunk.get("choices", []):
                    tokens += c.get("token_ids") or []
                    finish = c.get("finish_reason") or finish
    except urllib.error.HTTPError as e:
        return tokens, finish, f"HTTP {e.code}: {e.read()[:300]!r}"
    except (urllib.error.URLError, OSError) as e:
        return tokens, finish, str(e)
    return tokens, finish, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quiver", default=os.path.join(invariance.ROOT, "build", "quiver"))
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--requests", type=int, default=36)
    ap.add_argument("--chunk", type=int, default=48, help="--max-num-batched-tokens of the server")
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=300)
    a = ap.parse_args()

    help_text = subprocess.run([a.quiver, "serve", "--help"], capture_output=True, text=True)
    if help_text.returncode != 0:
        print("server invariance: skipped, this quiver has no `serve` command")
        sys.exit(77)
    work = tempfile.mkdtemp(prefix="quiver_server_invariance_")
    model_dir, config = invariance.long_model(MODEL, work)
    adapters = sorted(os.listdir(os.path.join(model_dir, "adapters")))
    rng = random.Random(a.seed)
    requests = []
    for i in range(a.requests):
        lora = ([None] + adapters)[i % (len(adapters) + 1)]
        n = rng.randrange(64, 601)
        requests.append({"id": f"s{i:02d}", "prompt_token_ids": [rng.randrange(config["vocab_size"]) for _ in range(n)],
                         "lora": lora, "max_tokens": a.max_tokens, "temperature": 0.0, "ignore_eos": True})

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    served = "base"
    cmd = [a.quiver, "serve", "--model", model_dir, "--served-model-name", served, "--port", str(port),
           "--device", a.device, "--max-lora-rank", "64", "--max-loras", "4", "--max-num-batched-tokens",
           str(a.chunk), "--http-threads", str(a.clients + 4)]
    for name in adapters:
        cmd += ["--lora-modules", f"{name}={os.path.join(model_dir, 'adapters', name)}"]
    log = open(os.path.join(work, "serve.log"), "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_healthy(url, proc, 120):
            log.flush()
            text = open(os.path.join(work, "serve.log")).read()
            if "no CUDA device" in text or "without CUDA" in text:
                print(f"server invariance: skipped, no GPU ({text.strip().splitlines()[-1][:200]})")
                sys.exit(77)
            print("server invariance: the server did not become healthy:\n" + text[-2000:])
            sys.exit(1)
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(max_workers=a.clients) as pool:
            futures = {r["id"]: pool.submit(stream_completion, url, r["lora"] or served, r, a.timeout)
                       for r in requests}
            served_out = {rid: f.result() for rid, f in futures.items()}
        elapsed = time.time() - t0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()

    runner = invariance.Runner(a.quiver, work, a.timeout)
    path = os.path.join(work, "requests.jsonl")
    invariance.write_jsonl(path, requests)
    alone, err = runner.generate(model_dir, path, "alone", ["--device", a.device, "--max-num-seqs", "1"])
    if err:
        print(f"server invariance: generate failed: {err}")
        sys.exit(1)
    alone = {o["id"]: o for o in alone}
    failed = 0
    for r in requests:
        tokens, finish, error = served_out[r["id"]]
        ref = alone.get(r["id"], {})
        why = None
        if error:
            why = f"error: {error}"
        elif "error" in ref:
            why = f"generate error: {ref['error']}"
        elif tokens != ref.get("token_ids") or finish != ref.get("finish_reason"):
            why = f"served {tokens} ({finish}), alone {ref.get('token_ids')} ({ref.get('finish_reason')})"
        if why:
            failed += 1
            print(f"  {r['id']} (prompt {len(r['prompt_token_ids'])}, lora {r['lora']}): {why}")
    total = sum(len(v[0]) for v in served_out.values())
    shutil.rmtree(work, ignore_errors=True)
    print(f"server invariance ({a.device}, {a.clients} clients, chunk {a.chunk}): {len(requests) - failed} passed, "
          f"{failed} failed; {total} tokens in {elapsed:.1f} s")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
