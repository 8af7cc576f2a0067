"""Security settings and limits of `flashgen serve`, through its flags: the API key (flag and
environment variable), the loopback default, each limit's 4xx with its flag, 429 with Retry-After,
the connection cap, and SIGINT draining like SIGTERM."""
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import requests

from conftest import FLASHGEN, MODEL_DIR, MODEL_NAME, Server


def post(server, path, body, key=None, **kw):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return requests.post(server.url + path, data=data, headers=headers, timeout=60, **kw)


def test_api_key_from_flag_and_environment(tokenizer_dir):
    s = Server(tokenizer_dir, ["--api-key", "sk-flag"])
    try:
        comp = {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2}
        r = post(s, "/v1/completions", comp)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
        assert r.json()["error"]["code"] == "invalid_api_key"
        assert post(s, "/v1/completions", comp, key="sk-wrong").status_code == 401
        assert post(s, "/generate", {"inputs": "hi"}).json()["error_type"] == "authentication"
        assert requests.get(s.url + "/metrics", timeout=10).status_code == 401
        assert requests.get(s.url + "/health", timeout=10).status_code == 200
        assert post(s, "/v1/completions", comp, key="sk-flag").status_code == 200
        assert any("API key required" in l for l in s.lines)
        assert not any("sk-flag" in l for l in s.lines), "the key must never be logged"
    finally:
        s.kill()
    os.environ["FLASHGEN_API_KEY"] = "sk-env"
    try:
        s = Server(tokenizer_dir)
    finally:
        del os.environ["FLASHGEN_API_KEY"]
    try:
        assert requests.get(s.url + "/v1/models", timeout=10).status_code == 401
        ok = requests.get(s.url + "/v1/models", headers={"Authorization": "Bearer sk-env"}, timeout=10)
        assert ok.status_code == 200
    finally:
        s.kill()


def test_binds_loopback_by_default(tokenizer_dir):
    # conftest passes --host 127.0.0.1 to every other server; this one runs with the default.
    args = [FLASHGEN, "serve", "--model", MODEL_DIR, "--tokenizer", tokenizer_dir, "--port", "0", "--backend", "cpu",
            "--kv-cache-memory", "1MiB"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        port = None
        for line in proc.stdout:
            m = re.search(r"listening on http://([\d.:]+):(\d+)", line)
            if m:
                assert m.group(1) == "127.0.0.1", line
                port = int(m.group(2))
                break
        assert port
        # Not reachable on another address of this machine, if it has one.
        try:
            addrs = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
        except socket.gaierror:
            addrs = set()
        for addr in addrs - {"127.0.0.1"}:
            with socket.socket() as c:
                c.settimeout(2)
                assert c.connect_ex((addr, port)) != 0, addr
    finally:
        proc.kill()
        proc.wait(10)


def test_each_limit_answers_4xx_naming_its_flag(tokenizer_dir):
    s = Server(tokenizer_dir, ["--max-prompt-tokens", "8", "--max-output-tokens", "5", "--max-n", "2",
                               "--max-stop-sequences", "2", "--max-stop-bytes", "10", "--max-logprobs", "3",
                               "--max-json-depth", "8", "--max-header-bytes", "2KiB", "--max-body-bytes", "4KiB"])
    try:
        comp = {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2}

        def err(r, status, needle=None):
            assert r.status_code == status, r.text
            if needle:
                assert needle in r.text, r.text

        err(post(s, "/v1/completions", dict(comp, prompt="lorem ipsum dolor sit amet " * 3)), 400,
            "--max-prompt-tokens")
        err(post(s, "/v1/completions", dict(comp, max_tokens=6)), 400, "--max-output-tokens")
        err(post(s, "/v1/completions", dict(comp, n=3)), 400, "between 1 and 2")
        err(post(s, "/v1/completions", dict(comp, stop=["a", "b", "c"])), 400, "at most 2")
        err(post(s, "/v1/completions", dict(comp, stop=["x" * 11])), 400, "--max-stop-bytes")
        err(post(s, "/v1/completions", dict(comp, logprobs=4)), 400, "between 0 and 3")
        err(post(s, "/v1/completions", '{"model": "x", "prompt": ' + "[" * 9 + "]" * 9 + "}"), 400, "deeper than 8")
        err(post(s, "/v1/completions", dict(comp, prompt="x" * 5000)), 413, "--max-body-bytes")
        r = requests.get(s.url + "/v1/models", headers={"X-Pad": "a" * 3000}, timeout=10)
        err(r, 431, "--max-header-bytes")
        err(post(s, "/generate", {"inputs": "hi", "parameters": {"top_n_tokens": 4}}), 422)
        err(post(s, "/generate", {"inputs": "hi", "parameters": {"max_new_tokens": 6}}), 422)
        # Within every limit the request runs, and the default output length (16) is capped.
        r = post(s, "/v1/completions", {"model": MODEL_NAME, "prompt": "hi", "ignore_eos": True})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5, r.text
    finally:
        s.kill()


def open_stream(port, body):
    c = socket.create_connection(("127.0.0.1", port), timeout=30)
    payload = json.dumps(body).encode()
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
              str(len(payload)).encode() + b"\r\n\r\n" + payload)
    got = b""
    while b"data: " not in got:
        chunk = c.recv(4096)
        assert chunk, got
        got += chunk
    return c


def test_queue_and_connection_caps_answer_429_with_retry_after(make_slow_server):
    s = make_slow_server("--max-concurrent-requests", "2", "--max-connections", "4")
    body = {"model": MODEL_NAME, "prompt": "x", "max_tokens": 3000, "stream": True, "ignore_eos": True}
    held = [open_stream(s.port, body) for _ in range(2)]
    try:
        r = post(s, "/v1/completions", {"model": MODEL_NAME, "prompt": "x", "max_tokens": 2})
        assert r.status_code == 429 and r.headers["Retry-After"] == "1"
        assert r.json()["error"]["code"] == "queue_full"
        # Two streams and one idle keep-alive connection leave room for one more; the fifth is refused.
        idle = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        time.sleep(0.2)
        extra = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        time.sleep(0.2)
        refused = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        refused.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while True:
            chunk = refused.recv(4096)
            if not chunk:
                break
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 429"), reply
        assert b"Retry-After: 1" in reply
        for c in (idle, extra, refused):
            c.close()
        time.sleep(0.2)
        m = s.metrics()
        assert m["flashgen_http_connections_refused_total"] >= 1
    finally:
        for h in held:
            h.close()
    s.wait_idle()


def test_sigint_drains_like_sigterm(make_slow_server):
    s = make_slow_server("--drain-timeout", "60")
    result = {}

    def stream():
        r = requests.post(s.url + "/v1/completions", json={"model": MODEL_NAME, "prompt": "drain me",
                                                           "max_tokens": 40, "stream": True, "ignore_eos": True},
                          stream=True, timeout=60)
        result["lines"] = [l for l in r.iter_lines() if l]

    t = threading.Thread(target=stream)
    t.start()
    deadline = time.time() + 20
    while s.metrics()["flashgen_num_requests_running"] < 1 and time.time() < deadline:
        time.sleep(0.02)
    s.proc.send_signal(signal.SIGINT)
    t.join(60)
    rc = s.proc.wait(60)
    time.sleep(0.2)  # the reader thread takes the last lines
    assert rc == 0, "\n".join(s.lines[-60:])
    assert result["lines"][-1] == b"data: [DONE]"
    assert json.loads(result["lines"][-2][6:])["choices"][0]["finish_reason"] == "length"
    assert any("SIGINT" in l for l in s.lines)
