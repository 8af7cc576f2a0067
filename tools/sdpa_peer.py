#!/usr/bin/env python3
"""The peer for bench/attention/attention_bench: PyTorch SDPA (flash and cuDNN backends) on the
same shapes with contiguous KV (Llama-3-8B heads: 32 q, 8 kv, head_dim 128, bf16), timed the same
way (CUDA graph of n back-to-back calls, median of 11 replays / n; KV copies rotated when one set
is under 240 MB). Run it in the same device call as the bench.

  python3 tools/sdpa_peer.py [--json FILE] [--ours attention_bench.json] [--quick]

With --ours, prints flashgen's figures beside the peer's for the shapes both ran, and the issue's
targets as measured.
"""
import argparse
import json
import math
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HQ, HKV, D = 32, 8, 128
DT = torch.bfloat16
ROTATE_BYTES = 240e6


def time_calls(fn, n, reps=11):
    """Seconds per call: a CUDA graph of n calls (fn(i)), median over replays; events as fallback."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(2):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(n):
                fn(i)
        run = g.replay
    except Exception:  # some backends refuse capture; time eager calls instead
        torch.cuda.synchronize()

        def run():
            for i in range(n):
                fn(i)
    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3 / n)
    return statistics.median(times)


def calls_for(est):
    return int(min(200, max(1, 2e-3 / max(est, 1e-7))))


def bench_shape(backend, batch, q_len, kv_len, causal):
    kv_bytes = 2.0 * batch * kv_len * HKV * D * 2
    copies = 1 if kv_bytes >= ROTATE_BYTES else min(64, math.ceil(ROTATE_BYTES / kv_bytes))
    free, _ = torch.cuda.mem_get_info()
    if kv_bytes * copies + (4 << 30) > free:
        return None, "no memory"
    q = torch.empty(batch, HQ, q_len, D, device="cuda", dtype=DT).uniform_(-1, 1)
    ks = [torch.empty(batch, HKV, kv_len, D, device="cuda", dtype=DT).uniform_(-1, 1) for _ in range(copies)]
    vs = [torch.empty(batch, HKV, kv_len, D, device="cuda", dtype=DT).uniform_(-1, 1) for _ in range(copies)]
    # is_causal is top-left aligned in SDPA: it matches ours only when q_len == kv_len.
    use_causal = causal and q_len == kv_len
    pairs = batch * (q_len * (kv_len - q_len) + 0.5 * q_len * q_len) if causal else batch * q_len * kv_len
    flops = 4.0 * HQ * D * pairs

    def fn(i):
        c = i % copies
        return F.scaled_dot_product_attention(q, ks[c], vs[c], is_causal=use_causal, enable_gqa=True)

    try:
        with sdpa_kernel([backend]):
            fn(0)
            torch.cuda.synchronize()
            t = time_calls(fn, calls_for(max(kv_bytes / 4e12, flops / 3e14)))
    except Exception as e:  # the backend refused the shape
        return None, str(e).splitlines()[0][:80]
    finally:
        del q, ks, vs
        torch.cuda.empty_cache()
    return {"seconds": t, "kv_bytes": kv_bytes, "flops": flops}, ""


def shapes(quick):
    out = []
    # --quick: attention_bench --quick's decode shapes (issue #16's B1 kv8k/32k and B8 kv8k, and
    # one large batch).
    decode = [(1, 8192), (1, 32768), (8, 8192), (64, 8192)] if quick else [
        (b, kv) for b in (1, 8, 64, 256) for kv in (1024, 8192, 32768)]
    for b, kv in decode:
        out.append(("decode", f"B{b} kv{kv}", b, 1, kv, True))
    for n, s in [(1, 1024), (1, 4096), (1, 16384), (8, 2048)]:
        out.append(("prefill", f"{n}x{s} causal", n, s, s, True))
    for ql in [1, 2, 4, 8]:
        out.append(("spec", f"B32 kv4096 q_len{ql} (non-causal)", 32, ql, 4096, False))
    return out


def copy_bw():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    b = torch.empty_like(a)
    t = time_calls(lambda i: b.copy_(a), 4)
    return 2.0 * n / t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--ours")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    bw = copy_bw()
    print(f"copy bandwidth (torch, read + write): {bw / 1e9:.0f} GB/s")
    rows = []
    for group, name, b, ql, kv, causal in shapes(args.quick):
        row = {"group": group, "name": name}
        for label, backend in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]:
            r, why = bench_shape(backend, b, ql, kv, causal)
            row[label] = r
            if r is None:
                row[label + "_why"] = why
        rows.append(row)
        parts = []
        for label in ("flash", "cudnn"):
            r = row[label]
            if r is None:
                parts.append(f"{label}: - ({row[label + '_why']})")
            else:
                parts.append(f"{label}: {r['seconds'] * 1e6:9.1f} us {100 * r['kv_bytes'] / r['seconds'] / bw:6.1f}% copy "
                             f"{r['flops'] / r['seconds'] / 1e12:6.1f} TFLOP/s")
        print(f"{group:8s} {name:34s} " + " | ".join(parts), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_bytes_per_s": bw, "rows": rows}, f, indent=1)
    if args.ours:
        side_by_side(args.ours, rows)


def side_by_side(path, peer_rows):
    with open(path) as f:
        ours = json.load(f)
    copy = ours["copy_bytes_per_s"]
    gemm = ours["gemm_flops_per_s"]
    by_name = {}
    for r in ours["rows"]:
        if not r["skipped"]:
            by_name[(r["group"], r["name"])] = r
    peer = {(r["group"], r["name"].split(" (")[0]): r for r in peer_rows}
    print(f"\nflashgen vs PyTorch SDPA (copy {copy / 1e9:.0f} GB/s, GEMM {gemm / 1e12:.0f} TFLOP/s, same run)")
    print(f"{'case':46s} {'ours_us':>9s} {'%copy':>6s} {'TF/s':>6s} | {'flash_us':>9s} {'cudnn_us':>9s}")
    for (g, n), r in by_name.items():
        key = (g, n.replace(" page16", "").replace(" page1", "").replace(" page256", ""))
        if g == "decode" and not n.endswith("page16"):
            continue
        p = peer.get(key, {})
        f_us = f"{p['flash']['seconds'] * 1e6:9.1f}" if p.get("flash") else f"{'-':>9s}"
        c_us = f"{p['cudnn']['seconds'] * 1e6:9.1f}" if p.get("cudnn") else f"{'-':>9s}"
        s = r["seconds"]
        print(f"{g + ' ' + n:46s} {s * 1e6:9.1f} {100 * r['kv_bytes'] / s / copy:5.1f}% {r['flops'] / s / 1e12:6.1f} | {f_us} {c_us}")
    # The targets, as measured.
    read = ours.get("read_bytes_per_s", copy)

    def pct(name, ceiling=copy):
        r = by_name.get(("decode", name))
        return 100 * r["kv_bytes"] / r["seconds"] / ceiling if r else float("nan")
    big = [pct(f"B{b} kv{kv} page16") for b in (8, 64, 256) for kv in (8192, 32768)]
    print("\ntargets:")
    big_read = [pct(f"B{b} kv{kv} page16", read) for b in (8, 64, 256) for kv in (8192, 32768)]
    print(f"  decode >= 85% copy at B>=8, kv>=8k (page 16): min {min(big):.1f}% of copy, "
          f"{min(big_read):.1f}% of read-only streaming")
    print(f"  decode >= 70% copy at B1 kv32k: {pct('B1 kv32768 page16'):.1f}% of copy, "
          f"{pct('B1 kv32768 page16', read):.1f}% of read-only streaming")
    ratios = []
    for b in (1, 8, 64, 256):
        for kv in (1024, 8192, 32768):
            p1 = by_name.get(("decode", f"B{b} kv{kv} page1"))
            p16 = by_name.get(("decode", f"B{b} kv{kv} page16"))
            if p1 and p16:
                ratios.append(p1["seconds"] / p16["seconds"])
    if ratios:
        print(f"  page 1 / page 16 time: max {max(ratios):.3f} (target <= 1.15)")
    for n in ("1x4096 causal page16", "1x16384 causal page16"):
        r = by_name.get(("prefill", n))
        p = peer.get(("prefill", n.replace(" page16", "")), {})
        if r and p.get("flash"):
            print(f"  prefill {n}: ours {r['flops'] / r['seconds'] / 1e12:.0f} TFLOP/s vs flash "
                  f"{p['flash']['flops'] / p['flash']['seconds'] / 1e12:.0f} (cuDNN "
                  f"{(p['cudnn']['flops'] / p['cudnn']['seconds'] / 1e12) if p.get('cudnn') else float('nan'):.0f})")
    one = by_name.get(("mixed", "2048-chunk + 63 decodes kv4096, one call"))
    two = by_name.get(("mixed", "same, two calls"))
    if one and two:
        print(f"  mixed one call / two calls: {one['seconds'] / two['seconds']:.3f} (target <= 1.0)")
    s1 = by_name.get(("spec", "B32 kv4096 q_len1 page16"))
    s8 = by_name.get(("spec", "B32 kv4096 q_len8 page16"))
    if s1 and s8:
        print(f"  spec q_len 8 / q_len 1: {s8['seconds'] / s1['seconds']:.3f} (target <= 1.10)")


if __name__ == "__main__":
    sys.exit(main())
