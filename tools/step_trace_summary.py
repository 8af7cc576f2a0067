#!/usr/bin/env python3
"""Summarizes a `--step-trace` CSV (one line per engine step): the duration of steps that carry
running decodes (the steps a streaming client's inter-token gaps come from), split by how much
prefill they carried, and the longest of them with what they held.

  python3 tools/step_trace_summary.py steps.csv [--top 12]
"""
import argparse
import csv
import statistics
import sys


def pct(xs, p):
    """The p-th percentile with linear interpolation between order statistics."""
    if len(xs) < 2:
        return xs[0] if xs else float("nan")
    return statistics.quantiles(xs, n=100, method="inclusive")[p - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    dec = [r for r in rows if r["decodes"] > 0]
    print(f"{len(rows)} steps, {len(dec)} with decodes")
    if not dec:
        return 0
    groups = [("decode only", lambda r: r["prefill_tokens"] == 0),
              ("prefill 1-256", lambda r: 0 < r["prefill_tokens"] <= 256),
              ("prefill 257-1024", lambda r: 256 < r["prefill_tokens"] <= 1024),
              ("prefill > 1024", lambda r: r["prefill_tokens"] > 1024),
              ("all with decodes", lambda r: True)]
    print(f"{'steps with decodes':<20}{'count':>7}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}"
          f"{'decodes':>9}{'prefill':>9}")
    for name, pred in groups:
        g = [r for r in dec if pred(r)]
        if not g:
            continue
        ms = [1e3 * r["seconds"] for r in g]
        print(f"{name:<20}{len(g):>7}{pct(ms, 50):>9.2f}{pct(ms, 90):>9.2f}{pct(ms, 99):>9.2f}{max(ms):>9.2f}"
              f"{sum(r['decodes'] for r in g) / len(g):>9.1f}{sum(r['prefill_tokens'] for r in g) / len(g):>9.1f}")
    # A gap between two steps (host time outside any step) also delays every running sequence.
    gaps = [1e3 * (b["start_s"] - a["start_s"] - a["seconds"]) for a, b in zip(rows, rows[1:])]
    print(f"time between steps: p50 {pct(gaps, 50):.3f} ms, p99 {pct(gaps, 99):.3f} ms, max {max(gaps):.3f} ms")
    print(f"longest {a.top} steps with decodes:")
    print(f"{'step':>7}{'ms':>9}{'decodes':>9}{'prefill':>9}{'chunk':>7}{'running':>9}{'waiting':>9}")
    for r in sorted(dec, key=lambda r: -r["seconds"])[:a.top]:
        print(f"{int(r['step']):>7}{1e3 * r['seconds']:>9.2f}{int(r['decodes']):>9}{int(r['prefill_tokens']):>9}"
              f"{int(r['prefill_chunk']):>7}{int(r['running']):>9}{int(r['waiting']):>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
