#!/usr/bin/env python3
"""Writes the model parity fixtures under tests/fixtures/models/<name>/.

For each supported decoder family (and a few variants that exercise RoPE scalings, tied
embeddings, the classic config.json dialect, a bf16 checkpoint and a sharded checkpoint) this
creates a tiny randomly initialised Hugging Face model (seeded), saves it with save_pretrained
(safetensors), and records with transformers, in float32 on the CPU:

  reference.json  prompts, the greedy ids of generate(do_sample=False, max_new_tokens=32) for each
                  prompt, and the smallest top-1/top-2 logit margin seen while generating;
  logits.npy      float32 [sum of prompt lengths, vocab]: the logits of every prompt position,
                  prompts concatenated in order.

Run it with a Python that has torch and transformers (CPU is enough):
  python tools/make_model_fixtures.py [--out tests/fixtures/models]
The output is deterministic for a given torch/transformers version.
"""

import argparse
import json
import os
import shutil

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

VOCAB = 256
PROMPT_LENGTHS = (7, 19, 40)  # 40 is longer than every sliding window and dynamic-NTK limit below
NEW_TOKENS = 32
MIN_MARGIN = 1e-3  # greedy ties closer than this would make exact-id parity fragile

BASE = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    head_dim=64,  # explicit (q_dim 128 != hidden); 64 is a size the CUDA attention kernels are built for
    intermediate_size=80,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    initializer_range=0.15,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)

# name -> (config class name, extra config, options)
#   classic: rewrite config.json in the pre-transformers-5 dialect (rope_theta, rope_scaling,
#            torch_dtype) before the reference is computed from it
#   bf16:    save the checkpoint in bfloat16 (reference: bf16 weights, f32 compute)
#   shard:   save_pretrained max_shard_size, to get model.safetensors.index.json
VARIANTS = {
    "llama": ("LlamaConfig", dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), {}),
    "llama3_tied": (
        "LlamaConfig",
        dict(
            tie_word_embeddings=True,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        ),
        {"classic": "rope_type"},
    ),
    "llama_dynamic": (
        "LlamaConfig",
        dict(max_position_embeddings=16,
             rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}),
        {"classic": "type"},
    ),
    "llama_bf16": ("LlamaConfig", dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
                   {"bf16": True}),
    "mistral": (
        "MistralConfig",
        dict(sliding_window=8, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}),
        {},
    ),
    "qwen2": (
        "Qwen2Config",
        # head_dim derived from hidden_size / heads, as in real Qwen2 checkpoints
        dict(hidden_size=128, head_dim=None, use_sliding_window=True, sliding_window=8, max_window_layers=1,
             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        {},
    ),
    "qwen3": (
        "Qwen3Config",
        dict(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        {"shard": "100KB"},
    ),
}


def make_prompts(seed):
    g = np.random.default_rng(seed)
    return [[int(x) for x in g.integers(3, VOCAB, size=n)] for n in PROMPT_LENGTHS]


def randomize(model, seed):
    """HF init gives norms of exactly one and zero biases; perturb them so they are exercised."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))


def to_classic(path, type_key):
    """Rewrites config.json in the classic dialect: rope_theta + rope_scaling + torch_dtype."""
    with open(path) as f:
        cfg = json.load(f)
    rp = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rp.pop("rope_theta")
    kind = rp.pop("rope_type")
    if kind != "default":
        cfg["rope_scaling"] = {type_key: kind, **rp}
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def load(out_dir):
    return AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager").eval()


def build(name, out_root, seed):
    cls_name, extra, opts = VARIANTS[name]
    cfg_cls = getattr(transformers, cls_name)
    kwargs = {**BASE, **extra}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    cfg = cfg_cls(**kwargs)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    randomize(model, seed)
    out_dir = os.path.join(out_root, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    if opts.get("bf16"):
        model = model.to(torch.bfloat16)
    save_kwargs = {"safe_serialization": True}
    if "shard" in opts:
        save_kwargs["max_shard_size"] = opts["shard"]
    model.save_pretrained(out_dir, **save_kwargs)
    if "classic" in opts:
        to_classic(os.path.join(out_dir, "config.json"), opts["classic"])

    prompts = make_prompts(seed)
    rows, greedy, margins = [], [], []
    with torch.no_grad():
        for p in prompts:
            # A fresh model per call: dynamic-NTK rotary state must not leak between prompts.
            m = load(out_dir)
            rows.append(m(torch.tensor([p])).logits[0].float().numpy())
            m = load(out_dir)
            out = m.generate(torch.tensor([p]), do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=0,
                             pad_token_id=0, output_logits=True, return_dict_in_generate=True)
            ids = [int(x) for x in out.sequences[0, len(p):]]
            greedy.append(ids)
            for step_logits in out.logits:
                top = torch.topk(step_logits[0].float(), 2).values
                margins.append(float(top[0] - top[1]))
    logits = np.concatenate(rows, axis=0).astype(np.float32)
    np.save(os.path.join(out_dir, "logits.npy"), logits)
    ref = {
        "architecture": cfg.architectures[0] if cfg.architectures else type(model).__name__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "seed": seed,
        "prompts": prompts,
        "greedy": greedy,
        "max_new_tokens": NEW_TOKENS,
        "min_greedy_margin": min(margins),
        "max_abs_logit": float(np.abs(logits).max()),
    }
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(out_dir, x)) for x in os.listdir(out_dir))
    print(f"{name:14s} {ref['architecture']:20s} {size / 1024:7.1f} KiB  min margin {min(margins):.4f}  "
          f"greedy lens {[len(g) for g in greedy]}")
    return min(margins)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "models"))
    ap.add_argument("--only", nargs="*", help="variant names (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(args.out, exist_ok=True)
    for i, name in enumerate(VARIANTS):
        if args.only and name not in args.only:
            continue
        # Try a few seeds until greedy decoding never hinges on a near-tie.
        for attempt in range(10):
            if build(name, args.out, seed=1000 + i + 100 * attempt) >= MIN_MARGIN:
                break
        else:
            raise SystemExit(f"{name}: no seed gave a greedy margin of {MIN_MARGIN}")


if __name__ == "__main__":
    main()
