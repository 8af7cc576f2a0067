#!/usr/bin/env python3
"""Sums an Nsight Compute source page (`ncu -i REP --page source --csv --print-source sass`) by
what each SASS instruction does: the warp-stall samples of tensor-core issue and waits, named
barriers, mbarrier waits, the softmax's arithmetic, loads and stores, and the rest (for a
warp-specialized kernel, its consumers' and its producer's code apart); then the instructions
with the most samples, each with its share and its most frequent stall reasons.
Used to see where the Hopper prefill kernel's warps wait (bench/attention/ncu_prefill.sh).

  python3 tools/ncu_stalls.py SOURCE.csv [--top N]
"""
import argparse
import collections
import csv
import re
import sys

CLASSES = [  # (name, opcode pattern), first match wins
    ("wgmma issue", r"^HGMMA"),
    ("wgmma wait (WARPGROUP.DEPBAR)", r"^WARPGROUP\.DEPBAR"),
    ("wgmma fence (WARPGROUP.ARRIVE)", r"^WARPGROUP\.ARRIVE"),
    ("named barrier (BAR)", r"^BAR"),
    ("mbarrier (SYNCS)", r"^SYNCS"),
    ("exp2 (MUFU)", r"^MUFU"),
    ("float math", r"^(FFMA|FMUL|FADD|FMNMX|FSEL|FSETP|F2F|F2FP|HADD2|HMUL2|FCHK)"),
    ("shuffle", r"^SHFL"),
    ("global load", r"^(LDG|LDGSTS|LDGDEPBAR)"),
    ("global store", r"^(STG|RED|ATOM)"),
    ("shared memory", r"^(LDS|STS|LDSM)"),
    ("branch", r"^(BRA|BSYNC|BSSY|WARPSYNC|EXIT|RET|CALL|YIELD|NANOSLEEP)"),
    ("integer and uniform", r"^(I|U|R2UR|S2UR|S2R|LEA|LOP3|SHF|SEL|MOV|PLOP3|CS2R|LDC|VIADD|POPC|FLO|PRMT|P2R|R2P)"),
]


def waits_on(rows, src):
    """Indices of the branches that loop on an mbarrier try-wait (`@!Pn BRA` after
    `SYNCS.PHASECHK... Pn`): their samples are the wait's, counted with the mbarrier."""
    out, pred = set(), None
    for i, r in enumerate(rows):
        text = r[src].strip()
        m = re.match(r"^SYNCS\.PHASECHK\S*\s+(P\d)", text)
        if m:
            pred = m.group(1)
            continue
        if pred and re.match(rf"^@!{pred}\s+BRA", text):
            out.add(i)
            pred = None
    return out


def opcode(sass):
    s = re.sub(r"^@!?U?P\w+\s+", "", sass.strip())  # drop a predicate
    return s.split(" ")[0] if s else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    with open(a.csv, newline="", errors="replace") as f:
        lines = [l for l in f if l.startswith('"')]
    # The export starts with a "Kernel Name" line; the table's header is the line naming Source.
    head = next((i for i, l in enumerate(lines) if '"Source"' in l), 0)
    lines = lines[head:]
    rows = list(csv.DictReader(lines))
    if not rows:
        sys.exit(f"{a.csv}: no rows")
    cols = rows[0].keys()
    src = next((c for c in cols if c.strip().lower() == "source"), None)
    total_col = next((c for c in cols if "Sampling (All" in c), None)
    if src is None or total_col is None:
        sys.exit(f"{a.csv}: no Source / 'Warp Stall Sampling (All Samples)' column in {list(cols)[:12]}")
    # Per-reason sample columns, where the export has them (names start with "stall_").
    # (All samples; the export repeats each as "... (Not Issued)".)
    reasons = [
        c
        for c in cols
        if (c.lower().startswith("stall_") or c.startswith("smsp__pcsamp_warps_issue_stalled")) and "Not Issued" not in c
    ]

    def num(v):
        try:
            return float(str(v).replace(",", ""))
        except ValueError:
            return 0.0

    total = sum(num(r[total_col]) for r in rows) or 1.0
    mbar_branches = waits_on(rows, src)

    def summarize(title, lo, hi):
        by_class = collections.Counter()
        for i in range(lo, hi):
            op = opcode(rows[i][src])
            name = (
                "mbarrier (SYNCS)"
                if i in mbar_branches
                else next((n for n, pat in CLASSES if re.match(pat, op)), "other")
            )
            by_class[name] += num(rows[i][total_col])
        part = sum(by_class.values()) or 1.0
        print(f"{title}: {part:.0f} samples ({100 * part / total:.1f}% of all)")
        for name, v in by_class.most_common():
            print(f"  {name:34s} {v:9.0f} {100 * v / part:5.1f}%")

    print(f"{len(rows)} SASS instructions, {total:.0f} warp-stall samples")
    # Warp-specialized kernels: the code from the first register release (USETMAXREG.DEALLOC, the
    # producer's setmaxnreg.dec) on is the producer's; before it, the consumers' and the prologue.
    # (ptxas puts the try-wait retry loops of both roles out of line at the end; they hold few
    # samples, and are counted with the producer.)
    split = next((i for i, r in enumerate(rows) if "USETMAXREG.DEALLOC" in r[src]), None)
    if split is None:
        summarize("all instructions", 0, len(rows))
    else:
        summarize(f"consumers (instructions before #{split})", 0, split)
        summarize(f"producer (#{split} on)", split, len(rows))
    print(f"top {a.top} instructions:")
    addr = next((c for c in cols if c.strip().lower() in ("address", "# address")), None)
    for i, r in sorted(enumerate(rows), key=lambda x: -num(x[1][total_col]))[: a.top]:
        v = num(r[total_col])
        why = sorted(((num(r[c]), c) for c in reasons), reverse=True)[:2]
        why_s = ", ".join(f"{c.replace('smsp__pcsamp_warps_issue_stalled_', '')} {w:.0f}" for w, c in why if w > 0)
        print(f"  #{i:5d} {r.get(addr, '') if addr else '':>8s} {100 * v / total:5.1f}%  {r[src].strip()[:70]:70s} {why_s}")


if __name__ == "__main__":
    main()
