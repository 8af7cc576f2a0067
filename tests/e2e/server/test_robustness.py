"""Robustness of `flashgen serve`: every bad request gets a 4xx JSON error and touches nothing
else; a client that disconnects mid-stream frees its pages; a full server answers 429; SIGTERM
drains in-flight requests and exits 0."""
import json
import socket
import threading
import time

import requests

from conftest import MODEL_NAME


def post(server, path, body, **kw):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return requests.post(server.url + path, data=data, headers={"Content-Type": "application/json"}, timeout=60, **kw)


def assert_openai_error(r, status, param=None):
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert set(e) >= {"message", "type", "param", "code"}
    assert e["message"]
    if param is not None:
        assert e["param"] == param, e


def test_bad_requests_get_json_errors_and_touch_nothing(server):
    before = server.metrics()
    comp = {"model": MODEL_NAME, "prompt": "hi"}
    assert_openai_error(post(server, "/v1/completions", b'{"model": "x", '), 400)          # malformed JSON
    assert_openai_error(post(server, "/v1/completions", b'["not", "an", "object"]'), 400)
    assert_openai_error(post(server, "/v1/completions", dict(comp, max_tokens="7")), 400, "max_tokens")
    assert_openai_error(post(server, "/v1/completions", dict(comp, temperature=[1])), 400, "temperature")
    assert_openai_error(post(server, "/v1/completions", dict(comp, n="2")), 400, "n")
    assert_openai_error(post(server, "/v1/chat/completions", {"model": MODEL_NAME, "messages": [{"role": 1}]}), 400)
    assert_openai_error(post(server, "/v1/completions", dict(comp, bogus_field=1)), 400, "bogus_field")
    assert_openai_error(post(server, "/v1/chat/completions",
                             {"model": MODEL_NAME, "messages": [{"role": "user", "content": "x"}], "extra": 1}),
                        400, "extra")
    assert_openai_error(post(server, "/v1/completions", dict(comp, max_tokens=-1)), 400, "max_tokens")
    assert_openai_error(post(server, "/v1/completions", dict(comp, max_tokens=2**62)), 400, "max_tokens")
    assert_openai_error(post(server, "/v1/completions", dict(comp, max_tokens=2**70)), 400, "max_tokens")
    long_prompt = dict(comp, prompt="lorem ipsum " * 200)
    r = post(server, "/v1/completions", long_prompt)
    assert_openai_error(r, 400)
    assert r.json()["error"]["code"] == "context_length_exceeded"
    r = post(server, "/v1/completions", b'{"model": "fixture-llama", "prompt": "caf\xe9 \xff"}')
    assert_openai_error(r, 400)
    assert r.json()["error"]["code"] == "invalid_utf8"
    r = post(server, "/v1/completions", json.dumps(dict(comp, prompt="x" * 100000)))   # > --max-body-bytes 64KiB
    assert_openai_error(r, 413)
    # TGI routes answer in TGI's shape.
    r = post(server, "/generate", {"inputs": "hi", "parameters": {"max_new_tokens": 0}})
    assert r.status_code == 422 and r.json()["error_type"] == "validation"
    r = post(server, "/generate", {"inputs": "hi", "parameters": {"top_k": "many"}})
    assert r.status_code == 422
    r = post(server, "/generate", {"inputs": "word " * 400})
    assert r.status_code == 422 and "context" in r.json()["error"]
    r = post(server, "/generate", b"{oops")
    assert r.status_code == 422 and r.json()["error_type"] == "validation"
    # Nothing reached the engine, and the server still serves.
    after = server.metrics()
    assert after["flashgen_generation_tokens_total"] == before["flashgen_generation_tokens_total"]
    assert after["flashgen_prompt_tokens_total"] == before["flashgen_prompt_tokens_total"]
    ok = post(server, "/v1/completions", dict(comp, max_tokens=2))
    assert ok.status_code == 200


def test_tokenize_detokenize_health_info_metrics(server):
    r = post(server, "/tokenize", {"prompt": "hello world"})
    assert r.status_code == 200
    ids = r.json()["tokens"]
    assert r.json()["count"] == len(ids) > 0
    assert r.json()["max_model_len"] == 256
    d = post(server, "/detokenize", {"tokens": ids})
    assert d.json()["prompt"] == "hello world"
    assert post(server, "/detokenize", {"tokens": [999999]}).status_code == 400
    assert requests.get(server.url + "/health", timeout=10).status_code == 200
    info = requests.get(server.url + "/info", timeout=10).json()
    assert info["model_id"] == MODEL_NAME and info["max_total_tokens"] == 256
    text = requests.get(server.url + "/metrics", timeout=10).text
    for name in ("flashgen_requests_total", "flashgen_num_requests_waiting", "flashgen_num_requests_running",
                 "flashgen_kv_pages_used", "flashgen_kv_pages_total", "flashgen_prompt_tokens_total",
                 "flashgen_generation_tokens_total", "flashgen_time_to_first_token_seconds_bucket",
                 "flashgen_inter_token_latency_seconds_bucket", "flashgen_e2e_request_latency_seconds_bucket",
                 "flashgen_batch_size_bucket", "flashgen_prefix_cache_hit_ratio"):
        assert name in text, name


def open_stream(server, body):
    """Sends a streaming request on a raw socket and returns it once the first event arrived."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    payload = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
    got = b""
    while b"data: " not in got:
        chunk = s.recv(4096)
        assert chunk, got
        got += chunk
    return s


def test_disconnect_mid_stream_frees_pages(make_slow_server):
    server = make_slow_server()
    body = {"model": MODEL_NAME, "prompt": "a long story", "max_tokens": 3000, "stream": True, "ignore_eos": True}
    socks = [open_stream(server, body) for _ in range(4)]
    m = server.metrics()
    assert m["flashgen_kv_pages_used"] > 0
    for s in socks:
        s.close()
    m = server.wait_idle()
    assert m["flashgen_kv_pages_used"] == 0, m
    assert m["flashgen_num_requests_running"] == 0
    assert m['flashgen_request_finish_total{reason="cancelled"}'] >= 4


def test_queue_full_answers_429(make_slow_server):
    s = make_slow_server("--max-concurrent-requests", "2")
    body = {"model": MODEL_NAME, "prompt": "x", "max_tokens": 3000, "stream": True, "ignore_eos": True}
    held = [open_stream(s, body) for _ in range(2)]
    r = post(s, "/v1/completions", {"model": MODEL_NAME, "prompt": "x", "max_tokens": 2})
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "queue_full"
    r = post(s, "/generate", {"inputs": "x"})
    assert r.status_code == 429 and r.json()["error_type"] == "overloaded"
    for h in held:
        h.close()
    s.wait_idle()
    assert post(s, "/v1/completions", {"model": MODEL_NAME, "prompt": "x", "max_tokens": 2}).status_code == 200


def test_sigterm_drains_in_flight_then_exits_zero(make_slow_server):
    s = make_slow_server("--drain-timeout", "60")
    result = {}

    def stream():
        r = requests.post(s.url + "/v1/completions", json={"model": MODEL_NAME, "prompt": "drain me",
                                                           "max_tokens": 60, "stream": True, "ignore_eos": True},
                          stream=True, timeout=60)
        result["lines"] = [l for l in r.iter_lines() if l]

    t = threading.Thread(target=stream)
    t.start()
    deadline = time.time() + 20
    while s.metrics()["flashgen_num_requests_running"] < 1 and time.time() < deadline:
        time.sleep(0.02)
    s.proc.send_signal(15)
    # No new connections once draining.
    time.sleep(0.3)
    try:
        requests.get(s.url + "/health", timeout=2)
        refused = False
    except requests.exceptions.ConnectionError:
        refused = True
    assert refused
    t.join(60)
    assert s.proc.wait(60) == 0
    lines = result["lines"]
    assert lines[-1] == b"data: [DONE]"
    finals = [json.loads(l[6:]) for l in lines[:-1]]
    assert finals[-1]["choices"][0]["finish_reason"] == "length"
    assert any("drain" in l or "SIGTERM" in l for l in s.lines)


def test_sigterm_drain_timeout_cancels_and_exits_zero(make_slow_server):
    s = make_slow_server("--drain-timeout", "0.5")
    sock = open_stream(s, {"model": MODEL_NAME, "prompt": "x", "max_tokens": 3000, "stream": True,
                           "ignore_eos": True})
    t0 = time.time()
    assert s.terminate(timeout=30) == 0
    assert time.time() - t0 < 15
    sock.close()
