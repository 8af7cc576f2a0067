#!/usr/bin/env python3
"""Summarizes an `ncu --csv --metrics gpu__time_duration.sum` capture: total GPU time per kernel
name (shortened), the launch count and the share of the total, largest first. Used to see where a
decode step's time goes (tools/gpu_suite.sh leaves the raw CSV beside the summary).

  python3 tools/ncu_summary.py ncu.csv [--steps N]   (N: divide totals by the steps captured)
"""
import argparse
import collections
import csv
import re
import sys


def short(name):
    name = re.sub(r"<unnamed>::|\(anonymous namespace\)::", "", name)  # before the two cuts below
    name = re.sub(r"\(.*", "", name)          # drop parameter lists
    name = re.sub(r"<.*", "", name)           # and template arguments
    return name.split("::")[-1][:60]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=float, default=1.0)
    a = ap.parse_args()
    total = collections.Counter()
    count = collections.Counter()
    with open(a.csv, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "ns")
        ns = v * {"ns": 1, "nsecond": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6}.get(unit, 1)
        k = short(row["Kernel Name"])
        total[k] += ns
        count[k] += 1
    grand = sum(total.values()) or 1
    print(f"{'kernel':<62} {'launches':>8} {'us/step':>10} {'share':>7}")
    for k, ns in total.most_common():
        print(f"{k:<62} {count[k] / a.steps:>8.0f} {ns / 1e3 / a.steps:>10.1f} {100 * ns / grand:>6.1f}%")
    print(f"{'total GPU time':<62} {sum(count.values()) / a.steps:>8.0f} {grand / 1e3 / a.steps:>10.1f}")


if __name__ == "__main__":
    sys.exit(main())
