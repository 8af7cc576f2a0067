#!/usr/bin/env python3
"""Builds a byte-level BPE tokenizer folder whose ids fit the fixture models (vocab_size 256).

The fixture models under tests/fixtures/models/ are tiny random Llama-family checkpoints with a
256-id vocabulary and no tokenizer. `flashgen serve` needs a real tokenizer, so this script derives
one from the reference GPT-2 tokenizer (tests/fixtures/tokenizers.tar.xz, extracted by CMake into
<build>/test_fixtures/tokenizers/gpt2):

  ids 0..2     <pad>, <s>, </s>  (special added tokens; the models' pad/bos/eos ids)
  ids 3..245   the GPT-2 byte-level symbols of the 243 bytes that can occur in valid UTF-8
  ids 246..255 the first GPT-2 merges whose parts are already in the vocabulary

Every valid UTF-8 text encodes (bytes 0xC0, 0xC1, 0xF5..0xFF never occur in it), the pre-tokenizer,
decoder and merge format are GPT-2's, and tokenizer_config.json adds a small chat template.

usage: make_fixture_tokenizer.py GPT2_TOKENIZER_DIR OUT_DIR
Its output is committed as tests/fixtures/server_tokenizer (the server tests read that):
  python3 tests/e2e/server/make_fixture_tokenizer.py build/test_fixtures/tokenizers/gpt2 tests/fixtures/server_tokenizer
"""
import json
import os
import sys

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
        gpt2 = json.load(f)
    b2u = bytes_to_unicode()
    specials = ["<pad>", "<s>", "</s>"]
    vocab = {}
    for i, s in enumerate(specials):
        vocab[s] = i
    for b in range(256):
        if b in (0xC0, 0xC1) or b >= 0xF5:
            continue
        vocab[b2u[b]] = len(vocab)
    merges = []
    for m in gpt2["model"]["merges"]:
        if len(vocab) >= 256:
            break
        a, b = m.split(" ") if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b not in vocab:
            vocab[a + b] = len(vocab)
            merges.append(f"{a} {b}")
    assert len(vocab) == 256, len(vocab)
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
             "special": True}
            for i, s in enumerate(specials)
        ],
        "normalizer": None,
        "pre_tokenizer": gpt2["pre_tokenizer"],
        "post_processor": gpt2["post_processor"],
        "decoder": gpt2["decoder"],
        "model": dict(gpt2["model"], vocab=vocab, merges=merges),
    }
    config = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "add_bos_token": False,
        "model_max_length": 256,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
