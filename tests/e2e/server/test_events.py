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


def complete(server, prompt, max_tokens):
    r = requests.post(server.url + "/v1/completions", timeout=60,
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
