"""Clients that break HTTP's unwritten rules, against a running `quiver serve` (from
hostile.sh): slow heads, idle crowds past the connection cap, half-closed sockets,
pipelined requests and oversized heads. Prints ok/FAIL lines; exits 1 on any failure.

    python3 slow_clients.py PORT API_KEY HEADER_TIMEOUT_S MAX_CONNECTIONS
"""
import json
import socket
import sys
import threading
import time

PORT, KEY = int(sys.argv[1]), sys.argv[2]
HEADER_TIMEOUT, MAX_CONNECTIONS = float(sys.argv[3]), int(sys.argv[4])
failed = False


def report(ok, what):
    global failed
    print(("ok   - " if ok else "FAIL - ") + what, flush=True)
    failed = failed or not ok


def connect():
    s = socket.create_connection(("127.0.0.1", PORT))
    s.settimeout(30)
    return s


def request(path, body, extra=""):
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n{extra}\r\n")
    return head.encode() + data


COMPLETION = {"model": "base", "prompt": [5, 6, 7], "max_tokens": 4, "temperature": 0}


def read_all(s):
    out = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        out += chunk
    return out


def responses(raw):
    """(status, body) of each final response in `raw`, interim 1xx ones skipped."""
    out = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
        if 100 <= status < 200:
            raw = rest
            continue
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size_line, _, rest = rest.partition(b"\r\n")
                size = int(size_line, 16)
                body += rest[:size]
                rest = rest[size + 2:]
                if size == 0:
                    break
        else:
            n = int(headers.get("content-length", "0"))
            body, rest = rest[:n], rest[n:]
        out.append((status, body))
        raw = rest
    return out


def timed_completion():
    s = connect()
    t = time.monotonic()
    s.sendall(request("/v1/completions", COMPLETION, "Connection: close\r\n"))
    got = responses(read_all(s))
    s.close()
    return (got[0][0] if got else None), time.monotonic() - t


# ---- slow heads: one header line at a time never hold a worker ------------------------------
N_SLOW = 150
slow = [connect() for _ in range(N_SLOW)]
for s in slow:
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
stop_dribble = threading.Event()


def dribble():
    while not stop_dribble.wait(0.5):
        for s in slow:
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                pass


t0 = time.monotonic()
threading.Thread(target=dribble, daemon=True).start()
times = []
for _ in range(5):
    status, took = timed_completion()
    times.append(took)
    report(status == 200, f"a keyed completion among {N_SLOW} slow clients: HTTP {status} in {took:.2f} s")
report(max(times) < HEADER_TIMEOUT, f"none of them waited for the slow heads' deadline (max {max(times):.2f} s)")
answers = {}
for s in slow:
    s.settimeout(HEADER_TIMEOUT + 5)
    answers[s] = read_all(s)
stop_dribble.set()
elapsed = time.monotonic() - t0
timed_out = sum(1 for a in answers.values() if a.startswith(b"HTTP/1.1 408"))
report(timed_out == N_SLOW, f"every slow head got 408 ({timed_out} of {N_SLOW})")
report(elapsed < HEADER_TIMEOUT + 4, f"within the header deadline ({elapsed:.1f} s for a {HEADER_TIMEOUT:.0f} s limit)")
for s in slow:
    s.close()

# ---- a crowd of idle connections past the cap: the oldest make room ------------------------
crowd = [connect() for _ in range(MAX_CONNECTIONS)]
time.sleep(0.3)
status, took = timed_completion()
report(status == 200, f"a completion with {MAX_CONNECTIONS} idle connections open (the cap): HTTP {status}")
crowd[0].settimeout(2)
report(read_all(crowd[0]) == b"", "the connection waiting longest was closed to make room")
for s in crowd:
    s.close()
time.sleep(0.3)

# ---- half-closed clients still get their answer -------------------------------------------
for stream in (False, True):
    s = connect()
    s.sendall(request("/v1/completions", dict(COMPLETION, stream=stream)))
    s.shutdown(socket.SHUT_WR)
    got = responses(read_all(s))
    s.close()
    body = got[0][1] if got else b""
    ok = bool(got) and got[0][0] == 200 and ((b"data: [DONE]" in body) if stream else b'"choices"' in body)
    report(ok, f"a client that half-closed after sending gets its {'stream' if stream else 'answer'}"
               f" (HTTP {got[0][0] if got else None})")

# ---- pipelined requests, each answered in order --------------------------------------------
s = connect()
s.sendall(request("/v1/completions", dict(COMPLETION, prompt=[5, 6])) +
          request("/v1/completions", dict(COMPLETION, prompt=[5, 6, 7]), "Connection: close\r\n"))
got = responses(read_all(s))
s.close()
counts = [json.loads(b)["usage"]["prompt_tokens"] for st, b in got if st == 200]
report(counts == [2, 3], f"two pipelined requests answered in order (prompt tokens {counts})")

# ---- a head past 64 KiB ---------------------------------------------------------------------
s = connect()
try:
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"a" * 70000 + b"\r\n\r\n")
except OSError:
    pass
raw = read_all(s)
s.close()
report(raw.startswith(b"HTTP/1.1 431"), f"an oversized head gets 431 ({raw[:40]!r})")

sys.exit(1 if failed else 0)
