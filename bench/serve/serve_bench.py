#!/usr/bin/env python3
"""serve_bench: an asynchronous load generator for `flashgen serve` (any OpenAI-compatible server).

Sends /v1/completions streaming requests whose prompts are random token ids of chosen lengths and
whose outputs have exact lengths (max_tokens with ignore_eos), either at a request rate (Poisson
or fixed spacing) or at a fixed concurrency, and reports request throughput, output tokens/s,
time to first token, inter-token latency and end-to-end latency (p50/p90/p99).

Why Python: it needs nothing beyond the standard library (asyncio, raw HTTP/1.1 with chunked
SSE parsing), so the same file runs in CI, on a developer machine and on the GPU host; one event
loop drives thousands of open streams. Its own cost is a few microseconds per streamed event,
which is measured and printed (client_busy) so a client-bound run is visible; at very high token
rates run several instances.

Exit status: 0 when every request succeeded (and, with --check-idle, the server holds no KV page
and no request afterwards, read from /metrics); 1 otherwise.

Example:
  serve_bench.py --url http://127.0.0.1:8080 --num-requests 500 --request-rate 20 \
      --prompt-len uniform:64:512 --output-len fixed:128 --json out.json
"""
import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import urllib.parse
import urllib.request


def parse_dist(spec):
    """fixed:N | uniform:LO:HI | normal:MEAN:STD (clipped to >= 1) -> sampler(rng)."""
    parts = spec.split(":")
    kind = parts[0]
    try:
        vals = [float(x) for x in parts[1:]]
    except ValueError:
        raise SystemExit(f"bad length distribution '{spec}'")
    if kind == "fixed" and len(vals) == 1:
        return lambda rng: int(vals[0])
    if kind == "uniform" and len(vals) == 2:
        return lambda rng: rng.randint(int(vals[0]), int(vals[1]))
    if kind == "normal" and len(vals) == 2:
        return lambda rng: max(1, int(round(rng.gauss(vals[0], vals[1]))))
    raise SystemExit(f"bad length distribution '{spec}' (fixed:N, uniform:LO:HI or normal:MEAN:STD)")


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def http_json(url, timeout=30):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def scrape_metrics(base):
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out


class Result:
    __slots__ = ("ok", "error", "ttft", "itls", "token_itls", "e2e", "out_tokens", "prompt_tokens", "start")

    def __init__(self):
        self.ok = False
        self.error = ""
        self.ttft = None
        self.itls = []
        self.token_itls = []
        self.e2e = 0.0
        self.out_tokens = 0
        self.prompt_tokens = 0
        self.start = 0.0


async def one_request(host, port, path, body, timeout, client_busy):
    res = Result()
    res.start = time.perf_counter()
    payload = json.dumps(body).encode()
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        writer.write(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: " + host.encode() +
                     b"\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                     str(len(payload)).encode() + b"\r\n\r\n" + payload)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status = int(head[9:12])
        chunked = b"transfer-encoding: chunked" in head.lower()
        if status != 200 or not chunked:
            rest = await asyncio.wait_for(reader.read(), timeout)
            res.error = f"HTTP {status}: {rest[:200]!r}"
            return res
        buf = b""
        last = None
        last_token = None  # the previous event that carried tokens (with --token-itl)
        done = False
        while not done:
            size_line = await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout)
            size = int(size_line.strip(), 16)
            if size == 0:
                break
            data = await asyncio.wait_for(reader.readexactly(size + 2), timeout)
            now = time.perf_counter()
            t0 = time.perf_counter()
            buf += data[:-2]
            chunk_tokens = 0
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                if not event.startswith(b"data: "):
                    continue
                d = event[6:]
                if d == b"[DONE]":
                    done = True
                    break
                obj = json.loads(d)
                if "error" in obj:
                    res.error = str(obj["error"])[:200]
                    return res
                if obj.get("usage"):
                    res.out_tokens = obj["usage"]["completion_tokens"]
                    res.prompt_tokens = obj["usage"]["prompt_tokens"]
                for c in obj.get("choices", []):
                    if c.get("text"):
                        if last is None:
                            res.ttft = now - res.start
                        else:
                            res.itls.append(now - last)
                        last = now
                    # With logprobs every token arrives in an event naming it, also one whose text
                    # the server holds back (an incomplete UTF-8 sequence).
                    chunk_tokens += len((c.get("logprobs") or {}).get("tokens") or [])
            # The n tokens of one chunk (events the server wrote together) share the gap since the
            # previous chunk with tokens, as the server's own histogram counts them.
            if chunk_tokens:
                if last_token is not None:
                    res.token_itls.extend([(now - last_token) / chunk_tokens] * chunk_tokens)
                last_token = now
            client_busy[0] += time.perf_counter() - t0
        res.e2e = time.perf_counter() - res.start
        if not done:
            res.error = "stream ended without [DONE]"
        elif res.out_tokens != body["max_tokens"]:
            res.error = f"got {res.out_tokens} tokens, asked {body['max_tokens']}"
        else:
            res.ok = True
    except (asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError, OSError, ValueError) as e:
        res.error = f"{type(e).__name__}: {e}"
    finally:
        if writer is not None:
            writer.close()
    return res


async def run(args):
    url = urllib.parse.urlparse(args.url)
    if url.hostname not in ("127.0.0.1", "localhost", "::1") and not args.allow_remote:
        raise SystemExit("serve_bench only targets loopback addresses unless --allow-remote is given")
    host, port = url.hostname, url.port or 80
    model = args.model or http_json(args.url + "/v1/models")["data"][0]["id"]
    info = http_json(args.url + "/info")
    vocab = args.vocab_size or int(info.get("vocab_size", 0)) or 256
    max_len = int(info.get("max_total_tokens", 0)) or 1 << 30
    rng = random.Random(args.seed)
    prompt_len = parse_dist(args.prompt_len)
    output_len = parse_dist(args.output_len)
    bodies = []
    for _ in range(args.num_requests):
        out_n = max(1, output_len(rng))
        p_n = max(1, min(prompt_len(rng), max_len - out_n))
        bodies.append({"model": model, "prompt": [rng.randrange(3, vocab) for _ in range(p_n)], "max_tokens": out_n,
                       "temperature": args.temperature, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
        if args.token_itl:
            bodies[-1]["logprobs"] = 0
    client_busy = [0.0]
    results = []
    sem = asyncio.Semaphore(args.concurrency) if args.concurrency > 0 else None

    async def fire(body):
        if sem:
            async with sem:
                results.append(await one_request(host, port, "/v1/completions", body, args.timeout, client_busy))
        else:
            results.append(await one_request(host, port, "/v1/completions", body, args.timeout, client_busy))

    t_start = time.perf_counter()
    tasks = []
    for i, body in enumerate(bodies):
        if args.request_rate > 0 and i > 0:
            gap = rng.expovariate(args.request_rate) if args.arrival == "poisson" else 1.0 / args.request_rate
            await asyncio.sleep(gap)
        if time.perf_counter() - t_start > args.max_duration:
            break
        tasks.append(asyncio.create_task(fire(body)))
    await asyncio.wait_for(asyncio.gather(*tasks), args.max_duration + args.timeout)
    wall = time.perf_counter() - t_start
    return model, results, wall, client_busy[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="", help="default: the server's first model")
    ap.add_argument("--num-requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=0, help="fixed concurrency (0: unlimited)")
    ap.add_argument("--request-rate", type=float, default=0.0, help="requests/s (0: all at once)")
    ap.add_argument("--arrival", choices=["poisson", "fixed"], default="poisson")
    ap.add_argument("--prompt-len", default="uniform:16:64", help="fixed:N | uniform:LO:HI | normal:MEAN:STD")
    ap.add_argument("--output-len", default="fixed:32")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--vocab-size", type=int, default=0, help="default: from /info")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per request step")
    ap.add_argument("--max-duration", type=float, default=600.0, help="stop sending after this many seconds")
    ap.add_argument("--check-idle", action="store_true",
                    help="afterwards, require /metrics to show no KV page held and no request in flight")
    ap.add_argument("--token-itl", action="store_true",
                    help="also time every token (asks for logprobs, so an event names its tokens): an "
                         "event's text can be held back a step while it ends inside a UTF-8 sequence, "
                         "which the text-event ITL counts as one gap of two steps")
    ap.add_argument("--json", default="", help="write the summary here")
    ap.add_argument("--allow-remote", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    model, results, wall, busy = asyncio.run(run(args))
    ok = [r for r in results if r.ok]
    errors = [r for r in results if not r.ok]
    out_tokens = sum(r.out_tokens for r in ok)
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    itls = [x for r in ok for x in r.itls]
    token_itls = [x for r in ok for x in r.token_itls]
    e2es = [r.e2e for r in ok]
    summary = {
        "model": model, "requests": len(results), "succeeded": len(ok), "errors": len(errors),
        "wall_s": wall, "request_throughput": len(ok) / wall if wall else 0.0,
        "output_tokens_per_s": out_tokens / wall if wall else 0.0,
        "prompt_tokens": sum(r.prompt_tokens for r in ok), "output_tokens": out_tokens,
        "client_busy_s": busy,
        "concurrency": args.concurrency, "request_rate": args.request_rate, "arrival": args.arrival,
        "prompt_len": args.prompt_len, "output_len": args.output_len,
    }
    series = [("ttft_ms", ttfts), ("itl_ms", itls), ("e2e_ms", e2es)]
    if args.token_itl:
        series.append(("token_itl_ms", token_itls))
    for name, xs in series:
        for p in (50, 90, 99):
            summary[f"{name}_p{p}"] = percentile(xs, p) * 1e3
        summary[f"{name}_mean"] = statistics.fmean(xs) * 1e3 if xs else float("nan")
        summary[f"{name}_count"] = len(xs)
    idle_ok = True
    if args.check_idle:
        deadline = time.time() + 30
        while True:
            m = scrape_metrics(args.url)
            idle_ok = m.get("flashgen_kv_pages_used", 0) == 0 and m.get("flashgen_requests_in_flight", 0) == 0 and \
                m.get("flashgen_num_requests_running", 0) == 0
            if idle_ok or time.time() > deadline:
                break
            time.sleep(0.1)
        summary["kv_pages_used_after"] = m.get("flashgen_kv_pages_used")
        summary["idle_after"] = idle_ok

    print(f"serve_bench: {summary['requests']} requests to {model} in {wall:.2f} s, {len(errors)} errors")
    print(f"  request throughput  {summary['request_throughput']:10.2f} req/s")
    print(f"  output tokens/s     {summary['output_tokens_per_s']:10.1f}   ({out_tokens} tokens)")
    print(f"  {'':18}{'p50':>10}{'p90':>10}{'p99':>10}{'mean':>10}")
    labels = [("ttft_ms", "TTFT ms"), ("itl_ms", "ITL ms"), ("e2e_ms", "E2E ms")]
    if args.token_itl:
        labels.append(("token_itl_ms", "ITL per token ms"))
    for name, label in labels:
        print(f"  {label:18}" + "".join(f"{summary[f'{name}_{k}']:10.2f}" for k in ("p50", "p90", "p99", "mean")))
    print(f"  client busy         {busy:10.3f} s")
    if args.check_idle:
        print(f"  idle after run      {idle_ok} (kv_pages_used {summary['kv_pages_used_after']})")
    for r in errors[:5]:
        print(f"  error: {r.error}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    sys.exit(0 if not errors and idle_ok and results else 1)


if __name__ == "__main__":
    main()
