#!/usr/bin/env python3
"""Opcode mix of a kernel's innermost loop, read from its SASS, without a GPU.

  python3 tools/sass_loop_mix.py BINARY_OR_CUBIN KERNEL [--min-mma N] [--skip LO-HI ...]
  python3 tools/sass_loop_mix.py --sass FILE [--min-mma N] [--skip LO-HI ...]

Dumps KERNEL's SASS with cuobjdump (the PyPI wheel nvidia-cuda-cuobjdump has one that runs on the
CPU machine: pip download --no-deps nvidia-cuda-cuobjdump, unzip, nvidia/cu13/bin/cuobjdump on
PATH), finds the shortest backward branch whose body holds at least --min-mma tensor-core
instructions (HGMMA / HMMA; default 1), and prints the body's instruction count and its opcodes
by frequency. --skip drops address ranges (hex, e.g. 3940-3f40: a masked or softcapped path the
measured rows never take), so the count is the path that runs. Build the object for the device's
architecture, e.g. for the prefill attention kernel:

  nvcc -DFG_WGMMA=1 -DFG_WITH_CUDA=1 -Isrc --expt-relaxed-constexpr -O3 -DNDEBUG \\
      --generate-code=arch=compute_90a,code=sm_90a -std=c++20 -cubin -x cu \\
      src/backend/cuda/attention.cu -o /tmp/attn.cubin
  python3 tools/sass_loop_mix.py /tmp/attn.cubin \\
      _ZN2fg4cuda4attn22attention_wgmma_kernelI13__nv_bfloat16S3_Li128EEEvNS1_12KernelParamsE --min-mma 12
"""
import argparse
import collections
import re
import subprocess
import sys

LINE = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+([^;]+);")


def parse(sass):
    out = []
    for line in sass.splitlines():
        m = LINE.match(line)
        if m:
            out.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def opcode(text):
    words = text.split()
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary", nargs="?")
    ap.add_argument("kernel", nargs="?")
    ap.add_argument("--sass", help="a SASS listing (cuobjdump --dump-sass output) instead of a binary")
    ap.add_argument("--min-mma", type=int, default=1)
    ap.add_argument("--skip", action="append", default=[], help="LO-HI: hex addresses left out of the count")
    a = ap.parse_args()
    if a.sass:
        with open(a.sass) as f:
            sass = f.read()
    elif a.binary and a.kernel:
        sass = subprocess.run(["cuobjdump", "--dump-sass", "--function", a.kernel, a.binary], check=True,
                              capture_output=True, text=True).stdout
    else:
        ap.error("give BINARY KERNEL or --sass FILE")
    ins = parse(sass)
    if not ins:
        sys.exit("no SASS instructions found (wrong kernel name?)")
    loops = []
    for addr, text in ins:
        m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", text)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= addr:
            continue
        mma = sum(1 for x, t in ins if target <= x <= addr and opcode(t) in ("HGMMA", "HMMA"))
        if mma >= a.min_mma:
            loops.append((addr - target, target, addr))
    if not loops:
        sys.exit("no loop with %d or more tensor-core instructions" % a.min_mma)
    _, lo, hi = min(loops)
    skips = [tuple(int(v, 16) for v in s.split("-")) for s in a.skip]
    counts = collections.Counter()
    for addr, text in ins:
        if lo <= addr <= hi and not any(s <= addr < e for s, e in skips):
            counts[opcode(text)] += 1
    print("loop %04x-%04x: %d instructions" % (lo, hi, sum(counts.values())))
    for op, n in counts.most_common():
        print("  %-12s %d" % (op, n))


if __name__ == "__main__":
    main()
