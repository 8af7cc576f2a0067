"""Fixtures for the `flashgen serve` end-to-end tests.

Each server runs the real binary on the CPU backend with the fixture Llama model
(tests/fixtures/models/llama, 256-id vocabulary, 256-token context) and a tokenizer built for it by
make_fixture_tokenizer.py. Servers listen on 127.0.0.1 with a port the OS picks; the port is read
from the server's log. Everything is bounded in time.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import pytest
import requests

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("FG_SOURCE_DIR", os.path.abspath(os.path.join(HERE, "..", "..", "..")))
FLASHGEN = os.environ.get("FLASHGEN_BIN", os.path.join(SOURCE_DIR, "build", "flashgen"))
MODEL_DIR = os.path.join(SOURCE_DIR, "tests", "fixtures", "models", "llama")
MODEL_NAME = "fixture-llama"


class Server:
    """One `flashgen serve` process; its log lines are kept for assertions."""

    def __init__(self, tokenizer_dir, extra_args=(), model_dir=MODEL_DIR):
        self.lines = []
        args = [FLASHGEN, "serve", "--model", model_dir, "--tokenizer", tokenizer_dir, "--served-model-name", MODEL_NAME,
                "--host", "127.0.0.1", "--port", "0", "--backend", "cpu", "--http-threads", "2", *extra_args]
        if "--kv-cache-memory" not in extra_args:
            args += ["--kv-cache-memory", "1MiB"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._port_seen = threading.Event()
        self.port = None
        threading.Thread(target=self._read, daemon=True).start()
        if not self._port_seen.wait(60) or self.port is None:
            self.kill()
            raise RuntimeError("flashgen serve did not start (" + " ".join(args) + "):\n" + "\n".join(self.lines))
        self.url = f"http://127.0.0.1:{self.port}"

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                self._port_seen.set()
        self._port_seen.set()

    def metrics(self, timeout=10):
        """The /metrics gauges and counters. A server at its connection cap answers 429 until the
        connections a test just closed are gone; that is retried for up to `timeout` seconds."""
        deadline = time.time() + timeout
        r = requests.get(self.url + "/metrics", timeout=10)
        while r.status_code == 429 and time.time() < deadline:
            time.sleep(0.05)
            r = requests.get(self.url + "/metrics", timeout=10)
        assert r.status_code == 200, r.text
        text = r.text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def wait_idle(self, timeout=20):
        """Waits until no sequence runs or waits and no KV page is held; returns the metrics."""
        deadline = time.time() + timeout
        while True:
            m = self.metrics()
            if m["flashgen_kv_pages_used"] == 0 and m["flashgen_num_requests_running"] == 0 and \
                    m["flashgen_num_requests_waiting"] == 0 and m["flashgen_requests_in_flight"] == 0:
                return m
            if time.time() > deadline:
                return m
            time.sleep(0.05)

    def terminate(self, timeout=30):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture(scope="session")
def tokenizer_dir():
    """The fixture models' tokenizer, committed (made once by make_fixture_tokenizer.py), so the
    server tests need nothing outside the repository."""
    return os.path.join(SOURCE_DIR, "tests", "fixtures", "server_tokenizer")


@pytest.fixture(scope="session")
def slow_model_dir(tokenizer_dir, tmp_path_factory):
    """A config-only model (served with --dummy-weights) big enough that CPU decoding takes
    milliseconds per token, so tests can act while a request is still running: the fixture
    Llama's shape scaled up (hidden 512, 4 layers, 4096-token context), same 256-id vocabulary."""
    out = tmp_path_factory.mktemp("slow_model")
    with open(os.path.join(MODEL_DIR, "config.json")) as f:
        config = json.load(f)
    config.update(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=64, max_position_embeddings=4096)
    with open(out / "config.json", "w") as f:
        json.dump(config, f)
    return str(out)


@pytest.fixture(scope="session")
def server(tokenizer_dir):
    s = Server(tokenizer_dir, ["--max-body-bytes", "64KiB", "--max-concurrent-requests", "64"])
    yield s
    s.kill()


@pytest.fixture()
def make_slow_server(tokenizer_dir, slow_model_dir):
    """Starts servers of the slow dummy-weight model with their own flags; killed afterwards."""
    started = []

    def start(*args):
        s = Server(tokenizer_dir, ("--dummy-weights", "--kv-cache-memory", "16MiB", *args), model_dir=slow_model_dir)
        started.append(s)
        return s

    yield start
    for s in started:
        s.kill()


@pytest.fixture(scope="session")
def long_context_model(tmp_path_factory):
    """The fixture Llama with a 2048-token context (its weights do not depend on it): room for real
    chat templates' system prompts and rendered tools."""
    out = tmp_path_factory.mktemp("llama_2k")
    for name in os.listdir(MODEL_DIR):
        shutil.copy(os.path.join(MODEL_DIR, name), out / name)
    with open(out / "config.json") as f:
        config = json.load(f)
    config["max_position_embeddings"] = 2048
    with open(out / "config.json", "w") as f:
        json.dump(config, f)
    return str(out)
