"""A short, bounded soak: serve_bench drives a few hundred streaming requests against the CPU
fixture model; every request must succeed and no KV page may be left held afterwards."""
import json
import os
import subprocess
import sys

from conftest import SOURCE_DIR


def test_serve_bench_soak(server, tmp_path):
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "bench", "serve", "serve_bench.py"),
                        "--url", server.url, "--num-requests", "300", "--concurrency", "16",
                        "--prompt-len", "uniform:4:48", "--output-len", "uniform:1:24", "--max-duration", "90",
                        "--timeout", "60", "--check-idle", "--json", str(out)],
                       capture_output=True, text=True, timeout=180)
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(out.read_text())
    assert s["requests"] == 300 and s["errors"] == 0
    assert s["idle_after"] is True and s["kv_pages_used_after"] == 0
    assert s["output_tokens"] > 300
    assert s["ttft_ms_p50"] > 0 and s["itl_ms_p50"] >= 0


def test_serve_bench_token_itl(server, tmp_path):
    # --token-itl times every token, text or not: a gap per output token after a request's first
    # chunk. The fixture model is fast enough that a client may read a whole stream as one chunk,
    # so only the total is bounded: some gaps, and never more than one per token after the first.
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "bench", "serve", "serve_bench.py"),
                        "--url", server.url, "--num-requests", "24", "--concurrency", "8",
                        "--prompt-len", "uniform:4:32", "--output-len", "fixed:48", "--token-itl",
                        "--timeout", "60", "--check-idle", "--json", str(out)],
                       capture_output=True, text=True, timeout=180)
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(out.read_text())
    assert s["errors"] == 0 and s["output_tokens"] == 24 * 48
    assert s["token_itl_ms_p50"] > 0 and s["token_itl_ms_p99"] >= s["token_itl_ms_p50"]
    assert 0 < s["token_itl_ms_count"] <= 24 * 47
