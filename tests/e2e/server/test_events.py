"""How engine results reach `flashgen serve`'s HTTP handlers: by notification, never by polling.
An idle server spends no CPU, and the /metrics batch-size histogram holds one observation per
engine step (the step's batch size), so its count is the step count and its sum the sequences
stepped."""
import os
import threading
import time

import requests

from conftest import MODEL_NAME, Server


def cpu_seconds(pid):
    """User + system CPU time of a process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def complete(server, prompt, max_tokens, timeout=60):
    r = requests.post(server.url + "/v1/completions", timeout=timeout,
                      json={"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                            "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()


def test_idle_server_spends_no_cpu(tokenizer_dir):
    s = Server(tokenizer_dir)
    try:
        complete(s, "warm up", 8)
        s.wait_idle()
        time.sleep(0.3)
        before = cpu_seconds(s.proc.pid)
        time.sleep(1.5)
        spent = cpu_seconds(s.proc.pid) - before
        assert spent <= 0.03, f"an idle server used {spent:.3f} s of CPU in 1.5 s"
    finally:
        s.kill()


def test_batch_size_histogram_counts_each_step_once(tokenizer_dir):
    s = Server(tokenizer_dir, ["--kv-cache-memory", "8MiB"])
    try:
        lengths = [5, 9, 13, 17, 21, 25]
        threads = [threading.Thread(target=complete, args=(s, f"prompt number {i}", n)) for i, n in enumerate(lengths)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        m = s.wait_idle()
        steps = m["flashgen_engine_steps_total"]
        assert m["flashgen_batch_size_count"] == steps
        # Short prompts and a roomy pool: each request is in one step per token it generates.
        assert m["flashgen_generation_tokens_total"] == sum(lengths)
        assert m["flashgen_batch_size_sum"] == sum(lengths)
        assert m['flashgen_batch_size_bucket{le="+Inf"}'] == steps
    finally:
        s.kill()


def test_prefill_chunk_budget_is_measured_and_keeps_greedy_tokens(make_slow_server):
    """The prefill chunk under a latency budget (on by default): prompts arrive while a long
    request decodes; /metrics then shows the measured decode-only step and the budget; a tight
    budget with a small floor chunks the prompts finely and gives the same greedy tokens as fixed
    chunks (--no-adaptive-prefill), whose budget gauge stays 0."""
    prompts = [f"request {i}: " + "lorem ipsum dolor sit amet " * (2 + 3 * i) for i in range(6)]
    max_tokens = [400] + [16] * 5

    def staggered(server):
        out = [None] * len(prompts)

        def one(i):
            time.sleep(0.03 * i)  # the later prompts arrive while request 0 decodes
            # The slow model's 400 steps under the sanitizer build on a loaded 2-core machine can
            # take minutes; this test is about chunking, not speed.
            out[i] = complete(server, prompts[i], max_tokens[i], timeout=300)["choices"][0]["text"]

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert None not in out, "a request failed"
        return out, server.wait_idle()

    texts = {}
    for name, extra in (("adaptive", ["--max-step-latency-ms", "0.001", "--min-prefill-chunk", "4"]),
                        ("fixed", ["--no-adaptive-prefill"])):
        texts[name], m = staggered(make_slow_server(*extra))
        assert m["flashgen_decode_step_seconds"] > 0, m
        if name == "adaptive":
            assert m["flashgen_step_latency_budget_seconds"] == 1e-6
            assert m["flashgen_prefill_chunk_tokens"] == 4
            assert m["flashgen_prefill_chunk_limited_steps_total"] > 10, m
        else:
            assert m["flashgen_step_latency_budget_seconds"] == 0
            assert m["flashgen_prefill_chunk_limited_steps_total"] == 0
    assert texts["adaptive"] == texts["fixed"]
