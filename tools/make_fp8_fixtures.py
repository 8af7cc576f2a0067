#!/usr/bin/env python3
"""Writes the FP8 checkpoint fixtures under tests/fixtures/models/fp8_*/.

From one tiny random Llama (seeded, bf16, tied embeddings; hidden 160 and intermediate 160 so that
128 x 128 blocks come out partial in both directions) this writes each linear layer's weight
(q/k/v/o, gate/up/down) quantized to float8_e4m3fn in the two published FP8 checkpoint formats,
each next to its exact dequantized twin:

  fp8_block/        transformers' fine-grained FP8: quantization_config {quant_method "fp8",
                    weight_block_size [128, 128], activation_scheme "dynamic"}; per weight
                    `<module>.weight_scale_inv` f32 [ceil(n / 128), ceil(k / 128)], scale = block
                    amax / 448, value = e4m3(w / scale) (clamped to +-448, round to nearest even);
  fp8_channel/      compressed-tensors "float-quantized": FP8 weights per channel, dynamic per-token
                    activations, ignore ["lm_head"]; per weight `<module>.weight_scale` bf16 [n, 1],
                    scale = bf16(row amax / 448);
  fp8_*_twin/       the same model with every quantized weight replaced by its exact f32 value
                    e4m3 * scale (one f32 product, as flashgen's loader computes it), no
                    quantization_config; every other tensor is the bf16 original.

Embeddings and norms stay bf16 in all four. flashgen's tests load each FP8 folder and its twin and
require the same weights and logits (tests/unit/model/fp8_weights_test.cc). The script also checks
that transformers' fine-grained dequantizer (the one its FP8 linear layers use; in f32) gives the
fine-grained twin exactly. (Its dequantize=True loading path instead splits a dimension evenly
among the scales, which differs from the 128-wide blocks where a block is partial, as here; real
checkpoints' dimensions are multiples of 128, where the two agree.)

Run it with a Python that has torch (float8 support) and transformers:
  python tools/make_fp8_fixtures.py [--out tests/fixtures/models]
The output is deterministic for a given torch version.
"""

import argparse
import json
import os
import shutil

import torch
import transformers
from safetensors.torch import save_file

SEED = 1717
E4M3_MAX = 448.0
BLOCK = 128
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

CONFIG = dict(
    vocab_size=256,
    hidden_size=160,
    head_dim=64,  # a size the CUDA attention kernels are built for
    intermediate_size=160,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    initializer_range=0.15,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)

FINEGRAINED = {
    "quant_method": "fp8",
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "weight_block_size": [BLOCK, BLOCK],
    "modules_to_not_convert": ["lm_head"],
}


def fp8_args(strategy, dynamic, observer):
    return {
        "num_bits": 8,
        "type": "float",
        "symmetric": True,
        "strategy": strategy,
        "dynamic": dynamic,
        "group_size": None,
        "block_structure": None,
        "actorder": None,
        "observer": observer,
        "observer_kwargs": {},
    }


COMPRESSED_TENSORS = {
    "quant_method": "compressed-tensors",
    "format": "float-quantized",
    "quantization_status": "compressed",
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": fp8_args("channel", False, "minmax"),
            "input_activations": fp8_args("token", True, None),
            "output_activations": None,
        }
    },
    "ignore": ["lm_head"],
    "kv_cache_scheme": None,
    "sparsity_config": {},
}


def to_e4m3(x):
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def quantize_blocks(w):
    """w [n, k] bf16 -> (codes [n, k] e4m3, scale_inv [ceil(n/128), ceil(k/128)] f32, twin f32)."""
    n, k = w.shape
    rn, rk = -(-n // BLOCK), -(-k // BLOCK)
    wf = w.float()
    scales = torch.empty(rn, rk, dtype=torch.float32)
    codes = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    for i in range(rn):
        for j in range(rk):
            blk = wf[i * BLOCK : (i + 1) * BLOCK, j * BLOCK : (j + 1) * BLOCK]
            s = blk.abs().max() / E4M3_MAX
            s = s if s > 0 else torch.tensor(1.0)
            scales[i, j] = s
            codes[i * BLOCK : (i + 1) * BLOCK, j * BLOCK : (j + 1) * BLOCK] = to_e4m3(blk / s)
    expanded = scales.repeat_interleave(BLOCK, 0)[:n].repeat_interleave(BLOCK, 1)[:, :k]
    return codes, scales, codes.float() * expanded


def quantize_channels(w):
    """w [n, k] bf16 -> (codes [n, k] e4m3, scale [n, 1] bf16, twin f32)."""
    wf = w.float()
    s = (wf.abs().amax(dim=1, keepdim=True) / E4M3_MAX).to(torch.bfloat16)
    s = torch.where(s > 0, s, torch.ones_like(s))
    codes = to_e4m3(wf / s.float())
    return codes, s, codes.float() * s.float()


def write(out_dir, config, tensors):
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})


def check_with_transformers(quant, twin):
    """transformers' fine-grained FP8 dequantizer (the one its FP8 linear layers use, in f32) must
    give the twin exactly: the same blocks, partial ones included, and the same f32 products."""
    try:
        from transformers.integrations.finegrained_fp8 import _dequantize_fp8_weight
    except ImportError as e:  # another transformers version: say so, the files stand
        print(f"note: transformers' FP8 dequantizer not found ({e}); skipped the check")
        return
    for name, value in twin.items():
        if any(f".{m}." in name for m in LINEAR):
            scale = quant[name[: -len("weight")] + "weight_scale_inv"]
            got = _dequantize_fp8_weight(quant[name].clone(), scale, [BLOCK, BLOCK], torch.float32)
            assert torch.equal(got, value), f"transformers dequantizes {name} differently"
    print("transformers' FP8 dequantizer gives the fine-grained twin exactly")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/models")
    args = ap.parse_args()

    torch.manual_seed(SEED)
    cfg = transformers.LlamaConfig(**CONFIG)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # HF init makes norms exactly one; perturb them so they are exercised
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif any(f".{m}." in name for m in LINEAR):
                # Rows of different magnitudes, so per-channel and per-block scales differ.
                p.mul_(torch.exp(0.5 * torch.randn(p.shape[0], 1, generator=g)))
    model = model.to(torch.bfloat16)
    base = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}  # tied
    config = json.loads(cfg.to_json_string())
    config["architectures"] = ["LlamaForCausalLM"]
    config["dtype"] = "bfloat16"

    for fmt, quantize, qcfg, scale_suffix in (
        ("block", quantize_blocks, FINEGRAINED, "weight_scale_inv"),
        ("channel", quantize_channels, COMPRESSED_TENSORS, "weight_scale"),
    ):
        quant, twin = dict(base), dict(base)
        for name, w in base.items():
            if not any(f".{m}." in name for m in LINEAR):
                continue
            codes, scales, exact = quantize(w)
            quant[name] = codes.contiguous()
            quant[name[: -len("weight")] + scale_suffix] = scales.contiguous()
            twin[name] = exact.contiguous()
        out = os.path.join(args.out, "fp8_" + fmt)
        write(out, {**config, "quantization_config": qcfg}, quant)
        write(out + "_twin", config, twin)
        print(f"wrote {out} and {out}_twin")
        if fmt == "block":
            check_with_transformers(quant, twin)


if __name__ == "__main__":
    main()
