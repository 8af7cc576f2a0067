#!/usr/bin/env python3
"""Predicted outputs (`prediction` on /v1/chat/completions) against plain decoding, through
`flashgen serve` and the OpenAI SDK: for each task, the reply time without and with the
prediction (greedy, one request at a time), the replies compared (they must be equal), and the
accepted / rejected prediction tokens. Tasks: the code edits of code_edit.jsonl with the original
code as the prediction (the reply rewrites parts of it), and "repeat this text" with the text as
the prediction (the reply is the prediction).

    bench/spec/prediction_bench.py [--model PATH] [--backend cpu|cuda] [--runs 3]

Uses ./build/flashgen (FLASHGEN overrides) and the default model unless --model is given."""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

import openai

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
REPEAT_TEXT = ("The one attention kernel takes queries of any length against a paged KV cache, so a step "
               "can mix prefill chunks, decodes and the verification of drafted tokens. Drafts come from "
               "n-gram lookup, a draft model, or the client's own prediction of the reply.")


def tasks():
    out = []
    with open(os.path.join(HERE, "code_edit.jsonl"), encoding="utf-8") as f:
        for i, line in enumerate(f):
            task = json.loads(line)
            content = task["messages"][0]["content"]
            code = content.split("\n\n", 1)[1]
            out.append((f"code_edit[{i}]", task["messages"], task["max_new_tokens"], code))
    out.append(("repeat", [{"role": "user", "content": "Repeat the following text exactly.\n\n" + REPEAT_TEXT}], 96,
                REPEAT_TEXT))
    return out


def start_server(args):
    cmd = [os.environ.get("FLASHGEN", os.path.join(ROOT, "build", "flashgen")), "serve", "--port", "0", "--backend",
           args.backend, "--kv-cache-memory", "256MiB"]
    if args.model:
        cmd += ["--model", args.model]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = []
    seen = threading.Event()

    def read():
        for line in proc.stdout:
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m and not port:
                port.append(int(m.group(1)))
                seen.set()
    threading.Thread(target=read, daemon=True).start()
    if not seen.wait(120):
        proc.kill()
        sys.exit("flashgen serve did not start")
    return proc, port[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    proc, port = start_server(args)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=600)
        print(f"{'task':14} {'tokens':>6} {'plain s':>8} {'predicted s':>11} {'speed-up':>8} {'accepted':>8} "
              f"{'rejected':>8}")
        for name, messages, max_tokens, prediction in tasks():
            kwargs = dict(model="m", messages=messages, max_tokens=max_tokens, temperature=0)
            times = {"plain": [], "predicted": []}
            replies = {}
            for _ in range(args.runs):
                for mode in ("plain", "predicted"):
                    extra = {"prediction": {"type": "content", "content": prediction}} if mode == "predicted" else {}
                    t0 = time.perf_counter()
                    r = client.chat.completions.create(**kwargs, **extra)
                    times[mode].append(time.perf_counter() - t0)
                    replies[mode] = r
            plain, pred = replies["plain"], replies["predicted"]
            if plain.choices[0].message.content != pred.choices[0].message.content:
                sys.exit(f"{name}: the reply with the prediction differs from the plain one")
            d = pred.usage.completion_tokens_details
            tp, tq = min(times["plain"]), min(times["predicted"])
            print(f"{name:14} {plain.usage.completion_tokens:6d} {tp:8.3f} {tq:11.3f} {tp / tq:7.2f}x "
                  f"{d.accepted_prediction_tokens:8d} {d.rejected_prediction_tokens:8d}")
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
