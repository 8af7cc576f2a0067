#!/usr/bin/env python3
"""Writes tests/fixtures/models/chat_llama/: a tiny random Llama with a REAL tokenizer, for the
server and end-to-end tests (text in, text out, chat templates, stop strings).

The tokenizer is a byte-level BPE trained (seeded, deterministic) with Hugging Face `tokenizers`
on a small built-in corpus, 512 tokens including ChatML special tokens; tokenizer_config.json
carries the Qwen2.5 chat template of tests/fixtures/chat_templates.tar.xz (extracted by CMake into
build/test_fixtures/). The model is a 2-layer Llama with that vocabulary, saved with
save_pretrained, plus float32 reference logits and greedy ids like the other model fixtures
(reference.json, logits.npy).

  python tools/make_chat_fixture.py [--out tests/fixtures/models/chat_llama]
Needs torch, transformers and tokenizers (CPU is enough).
"""

import argparse
import json
import os
import pathlib

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "build" / "test_fixtures" / "chat_templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB = 512

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "flashgen serves language models: one ragged batch per step, one attention kernel.",
    "Hello! How are you today? I am fine, thank you.",
    "def add(a, b):\n    return a + b\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 1000 3.14159",
    "You are a helpful assistant. Answer the question briefly.",
    "Paris is the capital of France. Berlin is the capital of Germany.",
    "Emoji and accents: café, naïve, 😀, 日本語, Ελληνικά.",
    "user assistant system tool call function arguments name content role",
]


def train_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "models" / "chat_llama"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    tok = train_tokenizer()
    vocab = tok.get_vocab_size()
    tok.save(os.path.join(args.out, "tokenizer.json"))
    eos_id = tok.token_to_id("<|im_end|>")
    eot_id = tok.token_to_id("<|endoftext|>")
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "add_bos_token": False,
                "add_eos_token": False,
                "bos_token": None,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "model_max_length": 512,
                "tokenizer_class": "PreTrainedTokenizerFast",
                "chat_template": TEMPLATE.read_text(),
            },
            f,
            indent=2,
            ensure_ascii=False,
        )

    torch.manual_seed(1234)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,  # a head size the CUDA attention kernels have (64, 128 or 256)
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        initializer_range=0.15,
        bos_token_id=eot_id,
        eos_token_id=[eos_id, eot_id],
        pad_token_id=eot_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.15 if p.dim() > 1 else 1.0 + 0.1 * torch.randn_like(p))
    model.save_pretrained(args.out, safe_serialization=True)

    prompts = [tok.encode(t).ids for t in ("Hello! How are you today?", "The capital of France is")]
    logits = []
    greedy = []
    with torch.no_grad():
        for ids in prompts:
            x = torch.tensor([ids])
            logits.append(model(x).logits[0].float().numpy())
            out = model.generate(x, max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=eot_id)
            greedy.append(out[0, len(ids):].tolist())
    np.save(os.path.join(args.out, "logits.npy"), np.concatenate(logits).astype(np.float32))
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump({"prompts": prompts, "greedy": greedy, "new_tokens": 16}, f)
    print(f"wrote {args.out}: vocab {vocab}, eos ids {[eos_id, eot_id]}")


if __name__ == "__main__":
    main()
