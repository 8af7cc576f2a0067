#!/usr/bin/env python3
"""How much one bf16 run's logit error says about another's, on a model parity fixture.

transformers computes the fixture's float32 logits; then the same f32 model runs N more times with
random rounding noise put into the output of every linear layer, embedding and norm (each element
times 1 + u, u uniform within bf16's half ulp, 2^-9: one round-to-nearest's worth), one seed per
run. Per prompt it prints transformers' own bf16 error (max over the vocabulary and positions of
|bf16 - f32| / max|f32|, as the fixtures record it), the spread of the noisy runs' largest errors
(median, p10, p90, max), the position that is most often the worst, and the per-position medians:
the positions where the model amplifies any rounding, and so where any bf16 implementation's error
peaks (tests/parity/model/model_parity_test.cc bounds bf16 logits with this in mind).

  python tools/bf16_noise_spread.py tests/fixtures/models/gemma2 [--samples 40]
Needs torch and transformers (CPU is enough).
"""

import argparse
import json
import os

import numpy as np
import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture")
    ap.add_argument("--samples", type=int, default=40)
    args = ap.parse_args()
    with open(os.path.join(args.fixture, "reference.json")) as f:
        ref = json.load(f)
    m = AutoModelForCausalLM.from_pretrained(args.fixture, dtype=torch.float32, attn_implementation="eager").eval()
    m16 = AutoModelForCausalLM.from_pretrained(args.fixture, dtype=torch.bfloat16, attn_implementation="eager").eval()
    noise = {"gen": None}

    def hook(module, inputs, out):
        if noise["gen"] is None or not torch.is_tensor(out):
            return None
        u = (torch.rand(out.shape, generator=noise["gen"]) * 2 - 1) * 2.0 ** -9
        return out * (1 + u)

    for mod in m.modules():
        if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)) or "norm" in type(mod).__name__.lower():
            mod.register_forward_hook(hook)
    for i, p in enumerate(ref["prompts"]):
        x = torch.tensor([p])
        with torch.no_grad():
            f32 = m(x).logits[0].float().numpy()
            scale = np.abs(f32).max()
            hf_pos = np.abs(m16(x).logits[0].float().numpy() - f32).max(axis=1) / scale
            runs = []
            for s in range(args.samples):
                noise["gen"] = torch.Generator().manual_seed(s)
                runs.append(np.abs(m(x).logits[0].float().numpy() - f32).max(axis=1) / scale)
            noise["gen"] = None
        runs = np.array(runs)
        worst = runs.max(axis=1)
        print(f"prompt {i} ({len(p)} tokens): transformers bf16 {hf_pos.max():.2e} (mean {hf_pos.mean():.2e}, worst "
              f"at {hf_pos.argmax()}); noisy runs' largest error: median {np.median(worst):.2e}, p10 "
              f"{np.percentile(worst, 10):.2e}, p90 {np.percentile(worst, 90):.2e}, max {worst.max():.2e}; most "
              f"often worst at position {np.bincount(runs.argmax(axis=1)).argmax()}")
        print("  per-position median (%):", " ".join(f"{v:.2f}" for v in np.median(runs, axis=0) * 100))
        print("  transformers bf16   (%):", " ".join(f"{v:.2f}" for v in hf_pos * 100))


if __name__ == "__main__":
    main()
