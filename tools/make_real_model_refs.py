#!/usr/bin/env python3
"""Writes the real-model reference files flashgen's default-model tests compare against.

Loads models/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch-model.sh puts it there) with Hugging Face
transformers in float32 on the CPU -- the GGUF weights dequantized to float32 -- and its tokenizer
from the same file, then writes to tests/fixtures/real_model/:

    reference.json       the model file's sha256 and the library versions; for each prompt (short,
                         code, multilingual, chat-formatted, 200+ tokens) its ids, the positions whose
                         logits are stored, and the greedy continuation (ids and the top-2 logit
                         margin of every step); the token ids and decoded text of a corpus of strings
                         (digits next to spaces, emoji, CJK, code, whitespace runs...); for a few
                         conversations the chat-template prompt, its ids and transformers' greedy reply
    logits_<name>.npy    float32 [len(positions), vocab]: the logits rows of each prompt

Before anything runs, every weight of the transformers model is checked bit for bit against
`gguf.quants.dequantize` of the file (with llama's q/k rows permuted back), the reference
flashgen's dequantization is tested against (tools/make_gguf_fixtures.py), so both sides compute
on the same weights.

Token ids: transformers' GGUF loader (5.x) builds SmolLM2's tokenizer without the pre-tokenizer the
file names (tokenizer.ggml.pre = "smollm" is not in its table), so it does not split numerals one by
one the way SmolLM2's own tokenizer.json and llama.cpp's "smollm" pre-tokenizer do. The references
hold the ids of the model's own tokenizer: transformers' tokenizer from the file with that
pre-tokenizer restored (Digits(individual_digits=True) then GPT-2's byte-level regex). Where
transformers' GGUF tokenizer gives other ids (only numerals outside ASCII, as in "١٢٣" or "½", since the
vocabulary has no merges across digits), the entry also records them as "ids_transformers_gguf".

This runs on a developer machine (CPU is enough, about a minute); CI only reads the files.
Usage: python3 tools/make_real_model_refs.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
Needs: pip install torch transformers gguf numpy accelerate  (torch from its CPU wheels is enough)
"""
import argparse
import hashlib
import importlib.metadata
import json
import os
import warnings

import numpy as np

warnings.filterwarnings("ignore")

import gguf  # noqa: E402
import torch  # noqa: E402
from tokenizers import pre_tokenizers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
GREEDY_TOKENS = 24
CHAT_TOKENS = 48

LONG_TEXT = (
    "The history of computing is a story of abstraction. Early machines were programmed by rewiring "
    "panels and flipping switches, and every program was tied to the hardware it ran on. Assembly "
    "languages gave names to instructions, and compilers later translated structured programs into "
    "those instructions, so that one program could run on many machines. Operating systems hid the "
    "details of disks, memory and devices behind files and processes. Networks connected machines, "
    "and protocols layered on top of each other let programs talk across continents without knowing "
    "how the bits travelled. Each layer made the one below it invisible to most programmers, and each "
    "layer also made new mistakes possible, because a hidden detail can still leak through: a slow disk, "
    "a lost packet, a cache that holds stale data. Good engineers learn where the abstractions leak. "
    "They measure before they optimize, they read the error messages carefully, and they write tests "
    "that describe what the system must do rather than how it happens to do it today. Over the decades "
    "the machines became millions of times faster, yet the hardest problems stayed the same: deciding "
    "what to build, explaining it clearly to others, and keeping it working as the world around it changes."
)

PROMPTS = [
    ("short", "The capital of France is"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n"),
    ("multilingual", "English: Good morning!\nFrançais : Bonjour !\nDeutsch: Guten Morgen!\n中文：早上好！\n日本語：おはようございます！\nEspañol:"),
    ("chat", None),  # the chat template applied to CHAT_PROMPT (filled in below)
    ("long", LONG_TEXT),
]
CHAT_PROMPT = [{"role": "user", "content": "Write a haiku about the sea."}]
GREEDY_PROMPTS = ["short", "code", "chat"]

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a concise assistant. Answer in one sentence."},
     {"role": "user", "content": "Why is the sky blue?"}],
    [{"role": "user", "content": "Hi! My name is Ada."},
     {"role": "assistant", "content": "Hello Ada! How can I help you today?"},
     {"role": "user", "content": "What is my name?"}],
]

CORPUS = [
    "", " ", "  ", "\t", "\n", "\n\n\n", "   \t\n  \n", " \r\n x", "Hello world", " Hello world", "hello   world",
    "1", "12", "123", "1234567890", "a 1 22 333 4444 55555", " 2024-12-01", "3.14159", "1,000,000", "$1234.56",
    "version 2.0.1", "x1y2z3", "١٢٣ ٤٥٦", "Ⅻ ½ ²",
    "🤗", "👍🏽", "👨‍👩‍👧‍👦 family", "I ❤️ tokenizers 🚀🚀", "emoji🙂mid",
    "你好，世界！", "日本語のテキストです。", "한국어 문장입니다.", "Привет, мир!", "مرحبا بالعالم", "Ελληνικά",
    "naïve café résumé", "e\u0301 vs é", "ﬁ ligature", "Straße",
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "<div class=\"x\">&amp;</div>", "https://example.com/path?q=1&r=2#frag", "user@example.com",
    "I'm sure they'll say we've done it; you'd think she's right.", "DON'T SHOUT",
    "<|im_start|>user\nhi<|im_end|>", "<|endoftext|>text after", "<think>reasoning</think>",
    "a" * 300, "ab" * 100 + " " * 50 + "end",
    "The quick brown fox jumps over the lazy dog. " * 3,
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def reverse_permute(w, n_head):
    """llama.cpp's q/k row order back to Hugging Face's (per head: row 2j+i -> i*half+j)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def check_weights(model, path):
    """Every weight equals the gguf package's dequantization of the file, bit for bit."""
    reader = gguf.GGUFReader(path)
    cfg = model.config
    names = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
    }
    per_layer = {
        "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
        "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    }
    state = model.state_dict()
    checked = 0
    for t in reader.tensors:
        if t.name in names:
            hf = names[t.name]
        else:
            _, layer, kind, suffix = t.name.split(".")
            hf = f"model.layers.{layer}.{per_layer[kind]}.{suffix}"
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        if ".attn_q." in t.name:
            w = reverse_permute(w, cfg.num_attention_heads)
        if ".attn_k." in t.name:
            w = reverse_permute(w, cfg.num_key_value_heads)
        mine = state[hf].detach().cpu().numpy()
        assert mine.dtype == np.float32 and mine.shape == w.shape, (hf, mine.dtype, mine.shape, w.shape)
        if not np.array_equal(mine.view(np.uint32), w.view(np.uint32)):
            raise SystemExit(f"{hf}: transformers' weights differ from gguf.quants.dequantize of {t.name}")
        checked += 1
    return checked


def top2_margin(row):
    top = torch.topk(row, 2).values
    return float(top[0] - top[1])


def greedy(model, ids, max_new_tokens, eos_ids):
    """Greedy decoding without a KV cache (one full forward per token), stopping after an eos id."""
    out, margins = [], []
    cur = list(ids)
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(torch.tensor([cur])).logits[0, -1]
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            margins.append(top2_margin(logits))
            cur.append(nxt)
            if nxt in eos_ids:
                break
    return out, margins


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "real_model"))
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    folder, file = os.path.dirname(os.path.abspath(args.model)), os.path.basename(args.model)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    gguf_tok = AutoTokenizer.from_pretrained(folder, gguf_file=file)  # as transformers builds it
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)
    model.eval()
    n_checked = check_weights(model, args.model)
    print(f"weights: {n_checked} tensors equal gguf.quants.dequantize bit for bit")
    eos_ids = {int(model.config.eos_token_id)}
    os.makedirs(args.out, exist_ok=True)

    ref = {
        "generator": "tools/make_real_model_refs.py",
        "model_file": file,
        "model_sha256": sha256(args.model),
        "versions": {p: importlib.metadata.version(p) for p in ("torch", "transformers", "gguf", "numpy")},
        "eos_token_ids": sorted(eos_ids),
        "prompts": [],
        "tokenizer_corpus": [],
        "chats": [],
    }

    chat_text = tok.apply_chat_template(CHAT_PROMPT, tokenize=False, add_generation_prompt=True)
    for name, text in PROMPTS:
        if text is None:
            text = chat_text
        ids = tok.encode(text, add_special_tokens=False)
        assert gguf_tok.encode(text, add_special_tokens=False) == ids, name
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
        n = len(ids)
        positions = sorted({n // 2, n - 1})
        np.save(os.path.join(args.out, f"logits_{name}.npy"), logits[positions].numpy().astype(np.float32))
        entry = {"name": name, "text": text, "ids": ids, "logits_positions": positions,
                 "logits_file": f"logits_{name}.npy"}
        if name in GREEDY_PROMPTS:
            entry["greedy_ids"], entry["greedy_margins"] = greedy(model, ids, GREEDY_TOKENS, eos_ids)
        ref["prompts"].append(entry)
        print(f"prompt {name}: {n} tokens" + (f", greedy {tok.decode(entry['greedy_ids'])!r}" if "greedy_ids" in entry else ""))

    differing = 0
    for s in CORPUS:
        ids = tok.encode(s, add_special_tokens=False)
        entry = {"text": s, "ids": ids, "decoded": tok.decode(ids)}
        other = gguf_tok.encode(s, add_special_tokens=False)
        if other != ids:
            entry["ids_transformers_gguf"] = other
            differing += 1
        ref["tokenizer_corpus"].append(entry)
    print(f"tokenizer corpus: {len(CORPUS)} strings, {differing} tokenized differently by transformers' GGUF tokenizer")

    for messages in CONVERSATIONS:
        prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tok.encode(prompt, add_special_tokens=False)
        assert gguf_tok.encode(prompt, add_special_tokens=False) == ids
        reply, margins = greedy(model, ids, CHAT_TOKENS, eos_ids)
        finish = "stop" if reply and reply[-1] in eos_ids else "length"
        content_ids = reply[:-1] if finish == "stop" else reply
        ref["chats"].append({
            "messages": messages, "prompt_text": prompt, "prompt_ids": ids, "reply_ids": reply,
            "reply_margins": margins, "reply_text": tok.decode(content_ids, skip_special_tokens=True),
            "finish_reason": finish, "max_tokens": CHAT_TOKENS,
        })
        print(f"chat: {ref['chats'][-1]['reply_text']!r} ({finish})")

    with open(os.path.join(args.out, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(args.out, p)) for p in os.listdir(args.out))
    print(f"wrote {args.out} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
