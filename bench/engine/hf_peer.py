#!/usr/bin/env python3
"""The peer for engine_bench (b): the same offline workload through Hugging Face transformers
`generate`, on the GPU machine, with random bf16 weights built from the same config.json.

  python3 bench/engine/hf_peer.py --config bench/configs/llama-3.1-8b --num-requests 1000 \
      --prompt-len 512 --output-len 256 --batch-sizes 32,64,128,256

Every request gets exactly --output-len tokens (min_new_tokens = max_new_tokens, like ignore_eos).
Prints output tokens/s per batch size and the best one; --json FILE writes them.
"""
import argparse
import json
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="bench/configs/llama-3.1-8b")
    ap.add_argument("--num-requests", type=int, default=1000)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--batch-sizes", default="32,64,128,256")
    ap.add_argument("--json")
    a = ap.parse_args()

    config = AutoConfig.from_pretrained(a.config)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.eval()
    gen = torch.Generator(device="cuda").manual_seed(1234)
    prompts = torch.randint(0, config.vocab_size, (a.num_requests, a.prompt_len), device="cuda", generator=gen)

    results = {}
    for bs in [int(x) for x in a.batch_sizes.split(",")]:
        try:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            tokens = 0
            with torch.inference_mode():
                for start in range(0, a.num_requests, bs):
                    batch = prompts[start:start + bs]
                    out = model.generate(batch, attention_mask=torch.ones_like(batch), do_sample=False,
                                         max_new_tokens=a.output_len, min_new_tokens=a.output_len,
                                         pad_token_id=0)
                    tokens += (out.shape[1] - a.prompt_len) * out.shape[0]
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
            results[bs] = {"output_tokens_per_s": tokens / wall, "wall_s": wall}
            print(f"batch {bs:4d}: {tokens / wall:10.1f} output tokens/s ({wall:.1f} s)", flush=True)
        except torch.cuda.OutOfMemoryError:
            print(f"batch {bs:4d}: out of memory", flush=True)
            torch.cuda.empty_cache()
    if results:
        best = max(results, key=lambda b: results[b]["output_tokens_per_s"])
        print(f"best: batch {best}, {results[best]['output_tokens_per_s']:.1f} output tokens/s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": a.config, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
