#!/usr/bin/env python3
"""Writes flashgen's GGUF dequantization fixtures from the `gguf` Python package.

For each ggml type flashgen loads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K) it makes a
few blocks of seeded random bytes, sets their f16 scale fields to random finite values (random
bits elsewhere exercise every quant code), and dequantizes them with `gguf.quants.dequantize`, the
reference dequantization transformers uses when it loads a GGUF file. It writes

    tests/fixtures/gguf/dequant/<TYPE>.bin   the raw blocks
    tests/fixtures/gguf/dequant/<TYPE>.npy   the expected float32 values
    tests/fixtures/gguf/types.json           {name: [id, block_size, block_bytes]} of every type

The C++ test (tests/unit/gguf/gguf_quant_test.cc) must reproduce every value bit for bit.
NaN bit patterns are left out of the F16/BF16 inputs: converting a signalling NaN quiets it on
some CPUs, so its bits are not portable.

Usage: python3 tools/make_gguf_fixtures.py [--out tests/fixtures/gguf]
Needs: pip install gguf numpy
"""
import argparse
import importlib.metadata
import json
import os

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

# type -> (blocks to write, byte offsets of the f16 scale fields within a block)
TYPES = {
    Q.F32: (64, []),
    Q.F16: (512, []),
    Q.BF16: (512, []),
    Q.Q8_0: (8, [0]),
    Q.Q4_0: (8, [0]),
    Q.Q4_1: (8, [0, 2]),
    Q.Q4_K: (4, [0, 2]),
    Q.Q5_K: (4, [0, 2]),
    Q.Q6_K: (4, [208]),
}


def make_blocks(rng, qtype, n_blocks, scale_offsets):
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    if qtype == Q.F32:
        vals = rng.standard_normal(n_blocks).astype(np.float32) * np.float32(3.0)
        vals[:4] = [0.0, -0.0, np.inf, -np.inf]
        vals[4:6] = [1e-40, -3e-39]  # subnormal
        return vals.view(np.uint8).copy()
    if qtype in (Q.F16, Q.BF16):
        bits = rng.integers(0, 1 << 16, size=n_blocks, dtype=np.uint32).astype(np.uint16)
        exp_mask, mant_mask = (0x7C00, 0x03FF) if qtype == Q.F16 else (0x7F80, 0x007F)
        nan = ((bits & exp_mask) == exp_mask) & ((bits & mant_mask) != 0)
        bits[nan] &= np.uint16(~mant_mask & 0xFFFF)  # NaN -> infinity of the same sign
        bits[:3] = [0x0000, 0x8000, 0x0001]  # +0, -0, the smallest subnormal
        return bits.view(np.uint8).copy()
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint32).astype(np.uint8)
    for off in scale_offsets:
        scales = (rng.standard_normal(n_blocks) * 0.05).astype(np.float16)
        raw[:, off:off + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "gguf"))
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(os.path.join(out, "dequant"), exist_ok=True)
    rng = np.random.default_rng(20261201)
    for qtype, (n_blocks, offsets) in TYPES.items():
        raw = make_blocks(rng, qtype, n_blocks, offsets)
        values = gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(-1)
        block_size, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        assert values.size == raw.size // block_bytes * block_size
        raw.tofile(os.path.join(out, "dequant", qtype.name + ".bin"))
        np.save(os.path.join(out, "dequant", qtype.name + ".npy"), values)
        print(f"{qtype.name}: {raw.size} bytes -> {values.size} values")
    table = {t.name: [int(t.value), *gguf.GGML_QUANT_SIZES[t]] for t in Q if t in gguf.GGML_QUANT_SIZES}
    with open(os.path.join(out, "types.json"), "w") as f:
        json.dump({"generator": "tools/make_gguf_fixtures.py", "gguf_version": importlib.metadata.version("gguf"),
                   "types": table}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
