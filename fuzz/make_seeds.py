#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into fuzz/corpus/<target>/seed-*.

Seeds are the inputs the fuzzer starts from: valid inputs of each kind (so the fuzzer starts deep
inside the parsers) and a few broken variants (so error paths are covered from the start). They
are made from the repository's own fixtures (configs, tokenizers, chat-template conversations,
llama.cpp vocab-test strings) and from tiny model files written here (safetensors and GGUF with a
one-layer model of hidden size 16 or 32). Inputs the fuzzer later found and kept (named by their
SHA-1) live beside the seeds; this script only rewrites files named seed-*.

    python3 fuzz/make_seeds.py [--fixtures BUILD/test_fixtures]

Standard library only; deterministic (same files every run).
"""
import argparse
import glob
import json
import math
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(HERE, "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def clear_seeds(target):
    for f in glob.glob(os.path.join(CORPUS, target, "seed-*")):
        os.remove(f)


# ---------------------------------------------------------------- HTTP and API bodies

COMPLETION = {"model": "m", "prompt": "Hello there", "max_tokens": 3, "temperature": 0}
API_BODIES = {
    # route index (api_request_fuzz.cc kPaths): 0 completions, 1 chat, 2 generate, 3 generate_stream,
    # 4 "/", 5 tokenize, 6 detokenize, 7 models
    0: [
        COMPLETION,
        dict(COMPLETION, stream=True, stream_options={"include_usage": True}),
        dict(COMPLETION, prompt=["one", "two"], n=2, seed=7, temperature=0.8, top_p=0.9),
        dict(COMPLETION, prompt=[1, 2, 3, 255], logprobs=3, echo=False),
        dict(COMPLETION, prompt=[[65, 66], [67]], stop=["\n", "lo"], max_tokens=0, echo=True),
        dict(COMPLETION, top_k=5, min_p=0.1, repetition_penalty=1.2, presence_penalty=0.5,
             frequency_penalty=-0.5, ignore_eos=True, stop_token_ids=[257], skip_special_tokens=False,
             include_stop_str_in_output=True, add_special_tokens=False, speculative=False),
        dict(COMPLETION, best_of=1, logit_bias={}, suffix="", user="u"),
        dict(COMPLETION, max_tokens=-1),
        dict(COMPLETION, n=1000),
        dict(COMPLETION, stop="x" * 2000),
        {"model": "m"},
        [1, 2],
    ],
    1: [
        {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
        {"model": "m", "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"},
                                    {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "More"}],
         "stream": True, "logprobs": True, "top_logprobs": 2},
        {"model": "m", "messages": [{"role": "developer", "content": [{"type": "text", "text": "a"},
                                                                      {"type": "text", "text": "b"}]},
                                    {"role": "user", "content": "x"}],
         "max_completion_tokens": 3, "response_format": {"type": "text"}, "tool_choice": "auto",
         "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
        {"model": "m", "messages": [{"role": "user", "content": "x"},
                                    {"role": "assistant", "content": None,
                                     "tool_calls": [{"id": "1", "type": "function",
                                                     "function": {"name": "f", "arguments": "{}"}}]},
                                    {"role": "tool", "tool_call_id": "1", "content": "42"}],
         "chat_template_kwargs": {"enable_thinking": False}, "add_generation_prompt": False},
        {"model": "m", "messages": []},
        {"model": "m", "messages": [{"role": "robot", "content": "x"}]},
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
    ],
    2: [
        {"inputs": "Hello", "parameters": {"max_new_tokens": 3, "details": True, "decoder_input_details": True,
                                           "top_n_tokens": 2, "seed": 3, "do_sample": True, "temperature": 0.7,
                                           "top_k": 4, "top_p": 0.9, "repetition_penalty": 1.1,
                                           "frequency_penalty": 0.2, "stop": ["l"], "return_full_text": True,
                                           "truncate": 3, "speculative": False}},
        {"inputs": "Hello"},
        {"inputs": "", "parameters": {"max_new_tokens": 0}},
        {"inputs": "x", "parameters": {"grammar": {"type": "json"}, "typical_p": 0.5}},
    ],
    3: [{"inputs": "Stream me", "parameters": {"max_new_tokens": 4, "details": True}}],
    4: [{"inputs": "Compat", "stream": False, "parameters": {"max_new_tokens": 2}},
        {"inputs": "Compat", "stream": True}],
    5: [{"prompt": "Hello world"}, {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True},
        {"prompt": "x", "messages": []}],
    6: [{"tokens": [72, 105, 256, 257]}, {"tokens": [999999]}, {"tokens": "x"}],
    7: [{}],
}


def api_seeds():
    clear_seeds("api_request")
    for route, bodies in API_BODIES.items():
        for i, body in enumerate(bodies):
            write("api_request", f"r{route}-{i}", bytes([route]) + json.dumps(body).encode())
            # The same with an API key configured (0x20) and sent (0x10).
            if i == 0:
                write("api_request", f"r{route}-{i}-key", bytes([route | 0x30]) + json.dumps(body).encode())
                write("api_request", f"r{route}-{i}-nokey", bytes([route | 0x20]) + json.dumps(body).encode())
    write("api_request", "deep", bytes([0]) + b'{"model":"m","prompt":' + b"[" * 200 + b"]" * 200 + b"}")
    write("api_request", "badutf8", bytes([0]) + b'{"model":"m","prompt":"caf\xe9"}')
    write("api_request", "get-models", bytes([7 | 0xC0]))


def http_request(method, path, body=b"", headers=(), key=True, chunked=False):
    h = [f"{method} {path} HTTP/1.1", "Host: localhost"]
    if key:
        h.append("Authorization: Bearer sk-fuzz")
    h += list(headers)
    if body and not chunked:
        h += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    if chunked:
        h += ["Content-Type: application/json", "Transfer-Encoding: chunked"]
        mid = len(body) // 2
        body = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (mid, body[:mid], len(body) - mid, body[mid:])
    return ("\r\n".join(h) + "\r\n\r\n").encode() + body


def http_seeds():
    clear_seeds("http_request")
    comp = json.dumps(COMPLETION).encode()
    chat = json.dumps(API_BODIES[1][0]).encode()
    tgi = json.dumps(API_BODIES[2][0]).encode()
    seeds = {
        "get-health": http_request("GET", "/health", key=False),
        "get-models": http_request("GET", "/v1/models"),
        "get-model": http_request("GET", "/v1/models/fuzz-model?x=1"),
        "get-metrics": http_request("GET", "/metrics"),
        "get-info": http_request("GET", "/info"),
        "post-completions": http_request("POST", "/v1/completions", comp),
        "post-completions-nokey": http_request("POST", "/v1/completions", comp, key=False),
        "post-completions-badkey": http_request("POST", "/v1/completions", comp, key=False,
                                                headers=["Authorization: Bearer wrong"]),
        "post-chat": http_request("POST", "/v1/chat/completions", chat),
        "post-generate": http_request("POST", "/generate", tgi),
        "post-generate-stream": http_request("POST", "/generate_stream", tgi),
        "post-chunked": http_request("POST", "/v1/completions", comp, chunked=True),
        "post-expect": http_request("POST", "/v1/completions", comp, headers=["Expect: 100-continue"]),
        "post-tokenize": http_request("POST", "/tokenize", b'{"prompt":"hi"}'),
        "pipelined": http_request("GET", "/health") + http_request("POST", "/v1/completions", comp) +
                     http_request("GET", "/v1/models", headers=["Connection: close"]),
        "http10": b"GET /health HTTP/1.0\r\n\r\n",
        "wrong-method": http_request("DELETE", "/v1/completions"),
        "unknown-path": http_request("GET", "/nope"),
        "too-large": http_request("POST", "/v1/completions", b"{}", headers=["Content-Length: 999999"])[:-2],
        "big-header": http_request("GET", "/health", headers=["X-Pad: " + "a" * 1500]),
        "bad-version": b"GET / HTTP/9.9\r\n\r\n",
        "bad-chunk": http_request("POST", "/v1/completions", headers=["Transfer-Encoding: chunked"]) + b"zz\r\n",
        "truncated-body": http_request("POST", "/v1/completions", comp)[:-10],
        "garbage": b"\x00\x01\x02 / HTTP/1.1\r\n\r\n",
        "no-host-lf-only": b"GET /health HTTP/1.1\n\n",
    }
    for name, data in seeds.items():
        write("http_request", name, data)


# ---------------------------------------------------------------- tokenizer

TOKENIZERS = ["tokenizers/gpt2", "tokenizers/llama-3-8b-instruct", "tokenizers/llama-3.2-instruct",
              "tokenizers/mistral-7b-v0.1", "tokenizers/mistral-7b-v0.1-legacy-format",
              "tokenizers/phi-3-mini-4k-instruct", "tokenizers/qwen2.5-instruct", "vocab_tests/ggml-vocab-gpt-2.gguf",
              "vocab_tests/ggml-vocab-llama-spm.gguf", "vocab_tests/ggml-vocab-phi-3.gguf",
              "server_tokenizer", "chat_llama"]


def tokenizer_seeds(fixtures):
    clear_seeds("tokenizer")
    texts = []
    for inp in sorted(glob.glob(os.path.join(fixtures, "vocab_tests", "*.inp"))):
        with open(inp, encoding="utf-8") as f:
            texts += f.read().split("\n__ggml_vocab_test__\n")
    texts = sorted(set(t for t in texts if len(t.encode()) < 400))
    texts += ["<|endoftext|><s></s><|im_start|>user\n", "\xff\xfe invalid", "a" * 300, " \t\n\r\u00a0\u3000"]
    rng = random.Random(19)
    for i, text in enumerate(texts):
        tok = i % len(TOKENIZERS)
        opts = rng.randrange(4)
        data = bytes([tok, opts]) + text.encode("utf-8", "surrogateescape")
        write("tokenizer", f"{i:03d}-{TOKENIZERS[tok].split('/')[-1]}", data)
    # Id sequences (option bit 4): spread over each vocabulary.
    for tok in range(len(TOKENIZERS)):
        ids = bytes(rng.randrange(256) for _ in range(64))
        write("tokenizer", f"ids-{TOKENIZERS[tok].split('/')[-1]}", bytes([tok, 4 | (tok % 4)]) + ids)


def tokenizer_json_seeds():
    clear_seeds("tokenizer_json")
    for name, path in [("server", "tests/fixtures/server_tokenizer"), ("chat-llama", "tests/fixtures/models/chat_llama")]:
        with open(os.path.join(ROOT, path, "tokenizer.json"), "rb") as f:
            tok = f.read()
        with open(os.path.join(ROOT, path, "tokenizer_config.json"), "rb") as f:
            cfg = f.read()
        write("tokenizer_json", name, tok + b"\n#--config--#\n" + cfg)
        write("tokenizer_json", name + "-noconfig", tok)
    # A small byte-level BPE with every component kind flashgen implements.
    vocab = {chr(c) if 33 <= c < 127 else f"<0x{c:02X}>": i for i, c in enumerate(range(256))}
    vocab.update({"Ġ": 256, "Ġt": 257, "he": 258, "Ġthe": 259})
    base = {
        "version": "1.0",
        "added_tokens": [{"id": 260, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}],
        "model": {"type": "BPE", "vocab": vocab, "merges": ["Ġ t", "h e", "Ġt he"], "byte_fallback": True,
                  "fuse_unk": False, "unk_token": None},
    }
    variants = {
        "bytelevel": dict(base, normalizer=None,
                          pre_tokenizer={"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
                          decoder={"type": "ByteLevel"}, post_processor=None),
        "sequence": dict(base, normalizer={"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]},
                         pre_tokenizer={"type": "Sequence", "pretokenizers": [
                             {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated",
                              "invert": False},
                             {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
                         decoder={"type": "ByteLevel"},
                         post_processor={"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>",
                                                                                                    "type_id": 0}},
                                                                                  {"Sequence": {"id": "A",
                                                                                                "type_id": 0}}],
                                         "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [260],
                                                                               "tokens": ["<s>"]}}}),
        "metaspace": dict(base, normalizer={"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
                          pre_tokenizer=None,
                          decoder={"type": "Sequence", "decoders": [
                              {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                              {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ",
                                                                           "start": 1, "stop": 0}]}),
        "bad-regex": dict(base, pre_tokenizer={"type": "Split", "pattern": {"Regex": "(a|"}, "behavior": "Isolated",
                                               "invert": False}),
    }
    for name, doc in variants.items():
        write("tokenizer_json", name, json.dumps(doc, ensure_ascii=False) + "\n#--config--#\n" +
              json.dumps({"bos_token": "<s>", "add_bos_token": True}))


# ---------------------------------------------------------------- Jinja and chat templates

JINJA = [
    "Hello {{ name }}!",
    "{% for m in messages %}{{ m.role }}: {{ m.content | trim }}\n{% endfor %}",
    "{% set ns = namespace(x=0) %}{% for i in range(10) %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}",
    "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{% for i in range(100000000) %}x{% endfor %}",
    "{% set s = 'ab' %}{% for i in range(40) %}{% set s = s + s %}{% endfor %}{{ s | length }}",
    "{{ 'x' * 100000000 }}",
    "{{ tools | tojson(indent=4) }}{{ messages | map(attribute='role') | join(',') }}",
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}",
    "{{ (messages | selectattr('role', 'equalto', 'user') | list | last).content[::-1] | upper }}",
    "{%- for k, v in d.items() | sort %}{{ k }}={{ v }};{% endfor %}{{ d.get('z', 'none') }}",
    "{{ '%s-%d' % ('a', 3) }} {{ 7 // 2 }} {{ 2 ** 10 }} {{ 'a,b'.split(',') }} {{ [1,2,3][1:] }}",
    "{% filter upper %}{{ x | default('y') }}{% endfilter %}{% raw %}{{ not }}{% endraw %}",
    "{{ strftime_now('%Y-%m-%d') }} {{ loop is defined }} {{ x is none }} {{ 'a' in 'abc' }}",
    "{% for x in items recursive %}{{ x.name }}{% if x.children %}({{ loop(x.children) }}){% endif %}{% endfor %}",
    "{{" + "(" * 300 + "1" + ")" * 300 + "}}",
    "{% if a %}" * 100 + "x" + "{% endif %}" * 100,
    "{{ x.__class__ }}{{ ''.__class__.__mro__ }}",
    "{% set x = 1 %}{% set y %}block{% endset %}{{ y ~ x }}{{ x if x else 'no' }}",
]
JINJA_VARS = {
    "name": "flashgen", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": " hi "}],
    "tools": [{"type": "function", "function": {"name": "f"}}], "d": {"b": 2, "a": 1},
    "items": [{"name": "a", "children": [{"name": "b", "children": []}]}], "x": None, "a": True,
}


def jinja_seeds(fixtures):
    clear_seeds("jinja")
    for i, t in enumerate(JINJA):
        write("jinja", f"{i:02d}", t + "\n#--vars--#\n" + json.dumps(JINJA_VARS))
    # The smaller real chat templates, with a conversation.
    conv = load_conversations()
    tmpls = sorted(glob.glob(os.path.join(fixtures, "chat_templates", "*.jinja")), key=os.path.getsize)[:25]
    for path in tmpls:
        with open(path, encoding="utf-8") as f:
            src = f.read()
        vars_ = {"messages": conv["conversations"]["multi_turn"], "add_generation_prompt": True,
                 "bos_token": "<s>", "eos_token": "</s>"}
        write("jinja", "real-" + os.path.basename(path)[:-6], src + "\n#--vars--#\n" + json.dumps(vars_))


def load_conversations():
    with open(os.path.join(ROOT, "tests", "fixtures", "chat_templates", "conversations.json"), encoding="utf-8") as f:
        return json.load(f)


def chat_template_seeds(fixtures):
    clear_seeds("chat_template")
    conv = load_conversations()
    n_templates = len(glob.glob(os.path.join(fixtures, "chat_templates", "*.jinja")))
    names = sorted(conv["conversations"])
    i = 0
    for name in names:
        for k in range(4):
            tmpl = (i * 37 + k * 11) % max(1, n_templates)
            opts = (1 if k % 2 == 0 else 0) | (2 if "tool" in name else 0)
            extra = json.dumps({"tools": conv["tools"], "kwargs": {"enable_thinking": k % 2 == 0}})
            data = bytes([tmpl, opts]) + json.dumps(conv["conversations"][name]).encode() + b"\n#--tools--#\n" + \
                extra.encode()
            write("chat_template", f"{name}-{k}", data)
            i += 1


# ---------------------------------------------------------------- model files

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16, "intermediate_size": 32,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
        "vocab_size": 32, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "torch_dtype": "float32"}


def tensor_names(cfg):
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim", h // cfg["num_attention_heads"])
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h]}
    if not cfg.get("tie_word_embeddings"):
        out["lm_head.weight"] = [v, h]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        out.update({p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
                    p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h],
                    p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q],
                    p + "mlp.gate_proj.weight": [i, h], p + "mlp.up_proj.weight": [i, h],
                    p + "mlp.down_proj.weight": [h, i]})
        if cfg.get("model_type") == "qwen2":
            out.update({p + "self_attn.q_proj.bias": [q], p + "self_attn.k_proj.bias": [kv],
                        p + "self_attn.v_proj.bias": [kv]})
    return out


def encode_values(dtype, values):
    if dtype == "F32":
        return struct.pack(f"<{len(values)}f", *values)
    if dtype == "F16":
        return struct.pack(f"<{len(values)}e", *values)
    if dtype == "BF16":
        return b"".join(struct.pack("<f", x)[2:] for x in values)
    raise ValueError(dtype)


def safetensors_image(cfg, dtype="F32", mutate=None):
    rng = random.Random(7)
    header, data = {}, b""
    for name, shape in tensor_names(cfg).items():
        n = math.prod(shape)
        values = [1.0] * n if name.endswith("norm.weight") else [rng.uniform(-0.2, 0.2) for _ in range(n)]
        raw = encode_values(dtype, values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header["__metadata__"] = {"format": "pt"}
    if mutate:
        header, data = mutate(header, data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def with_nan(header, data):
    off = header["model.layers.0.mlp.up_proj.weight"]["data_offsets"][0]
    return header, data[:off] + struct.pack("<f", float("nan")) + data[off + 4:]


def lying_size(header, data):
    header["model.layers.0.self_attn.q_proj.weight"]["shape"] = [16, 17]
    return header, data


def overlapping(header, data):
    header["model.norm.weight"]["data_offsets"] = list(header["model.embed_tokens.weight"]["data_offsets"])
    header["model.norm.weight"]["data_offsets"][1] = header["model.norm.weight"]["data_offsets"][0] + 64
    return header, data


def past_end(header, data):
    header["lm_head.weight"]["data_offsets"][1] += 4096
    return header, data


def wrong_dtype(header, data):
    header["model.layers.0.mlp.down_proj.weight"]["dtype"] = "I32"
    return header, data


def huge_shape(header, data):
    header["model.embed_tokens.weight"]["shape"] = [1 << 40, 1 << 40]
    return header, data


def safetensors_seeds():
    clear_seeds("safetensors")
    qwen = dict(TINY, architectures=["Qwen2ForCausalLM"], model_type="qwen2")
    tied = dict(TINY, tie_word_embeddings=True)
    sep = b"\n#--safetensors--#\n"
    cases = {
        "llama-f32": (TINY, "F32", None), "llama-bf16": (TINY, "BF16", None), "llama-f16": (TINY, "F16", None),
        "qwen2-f32": (qwen, "F32", None), "tied-f32": (tied, "F32", None), "nan": (TINY, "F32", with_nan),
        "lying-size": (TINY, "F32", lying_size), "overlap": (TINY, "F32", overlapping),
        "past-end": (TINY, "F32", past_end), "wrong-dtype": (TINY, "F32", wrong_dtype),
        "huge-shape": (TINY, "F32", huge_shape),
    }
    for name, (cfg, dtype, mutate) in cases.items():
        write("safetensors", name, json.dumps(cfg).encode() + sep + safetensors_image(cfg, dtype, mutate))
    img = safetensors_image(TINY)
    write("safetensors", "truncated", json.dumps(TINY).encode() + sep + img[:len(img) // 2])
    write("safetensors", "header-len-lies", json.dumps(TINY).encode() + sep + struct.pack("<Q", 1 << 40) + img[8:])


def model_config_seeds():
    clear_seeds("model_config")
    paths = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "models", "*", "config.json")) +
                   glob.glob(os.path.join(ROOT, "bench", "configs", "*", "config.json")))
    for p in paths:
        with open(p, "rb") as f:
            write("model_config", os.path.basename(os.path.dirname(p)), f.read())
    variants = {
        "llama3-rope": dict(TINY, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
        "dynamic-rope": dict(TINY, rope_scaling={"type": "dynamic", "factor": 2.0}),
        "yarn": dict(TINY, rope_scaling={"rope_type": "yarn", "factor": 4.0}),
        "qwen3-layers": dict(TINY, architectures=["Qwen3ForCausalLM"], model_type="qwen3", use_sliding_window=True,
                             sliding_window=16, layer_types=["sliding_attention"]),
        "mistral-window": dict(TINY, architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=32),
        "huge": dict(TINY, hidden_size=1 << 30, vocab_size=1 << 30, max_position_embeddings=1 << 62),
        "zero-heads": dict(TINY, num_attention_heads=0),
        "partial-rotary": dict(TINY, partial_rotary_factor=0.5),
        "unknown-arch": dict(TINY, architectures=["GPT2LMHeadModel"]),
        "fp8-static": dict(TINY, quantization_config={"quant_method": "fp8", "activation_scheme": "static",
                                                      "weight_block_size": [128, 128]}),
        "fp8-regex-ignore": dict(TINY, quantization_config={
            "quant_method": "compressed-tensors", "format": "float-quantized",
            "config_groups": {"g": {"targets": ["Linear"],
                                    "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                                                "symmetric": True, "dynamic": False},
                                    "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                                          "symmetric": True, "dynamic": True}}},
            "ignore": ["lm_head", "re:.*mlp[.]gate$"]}),
    }
    for name, cfg in variants.items():
        write("model_config", name, json.dumps(cfg))


# GGUF (version 3): a one-layer llama or qwen2 of hidden size 32 with a byte-level BPE vocabulary.
GGUF_T = {"u32": 4, "i32": 5, "f32": 6, "bool": 7, "str": 8, "arr": 9, "u64": 10}
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0 = 0, 1, 2, 8


def gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_kv(key, kind, value):
    out = gguf_str(key) + struct.pack("<I", GGUF_T[kind])
    if kind == "u32":
        out += struct.pack("<I", value)
    elif kind == "i32":
        out += struct.pack("<i", value)
    elif kind == "u64":
        out += struct.pack("<Q", value)
    elif kind == "f32":
        out += struct.pack("<f", value)
    elif kind == "bool":
        out += struct.pack("<B", 1 if value else 0)
    elif kind == "str":
        out += gguf_str(value)
    elif kind == "arr":
        elem, items = value
        out += struct.pack("<IQ", GGUF_T[elem], len(items))
        for it in items:
            out += gguf_str(it) if elem == "str" else struct.pack({"i32": "<i", "f32": "<f"}[elem], it)
    return out


def q8_0(values):
    out = b""
    for b in range(0, len(values), 32):
        blk = values[b:b + 32]
        d = max(abs(x) for x in blk) / 127 or 1.0
        out += struct.pack("<e", d) + bytes((round(x / d) & 0xFF) for x in blk)
    return out


def q4_0(values):
    out = b""
    for b in range(0, len(values), 32):
        blk = values[b:b + 32]
        m = max(blk, key=abs)
        d = m / -8 if m else 1.0
        q = [min(15, max(0, int(x / d + 8.5))) for x in blk]
        out += struct.pack("<e", d) + bytes(q[j] | (q[j + 16] << 4) for j in range(16))
    return out


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def gguf_image(arch="llama", qtype=GGML_Q8_0, tokenizer="gpt2", template=True, mutate=None):
    rng = random.Random(11)
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)] + ["Ġt", "he", "Ġthe", "<|endoftext|>"]
    types = [1] * 259 + [3]
    hidden, inter, heads, kv_heads, vocab = 32, 64, 2, 1, len(tokens)
    head_dim = hidden // heads
    kv = [gguf_kv("general.architecture", "str", arch), gguf_kv("general.alignment", "u32", 32),
          gguf_kv(f"{arch}.block_count", "u32", 1), gguf_kv(f"{arch}.embedding_length", "u32", hidden),
          gguf_kv(f"{arch}.feed_forward_length", "u32", inter), gguf_kv(f"{arch}.attention.head_count", "u32", heads),
          gguf_kv(f"{arch}.attention.head_count_kv", "u32", kv_heads),
          gguf_kv(f"{arch}.context_length", "u32", 128), gguf_kv(f"{arch}.rope.freq_base", "f32", 10000.0),
          gguf_kv(f"{arch}.attention.layer_norm_rms_epsilon", "f32", 1e-5),
          gguf_kv(f"{arch}.rope.dimension_count", "u32", head_dim)]
    if tokenizer == "gpt2":
        kv += [gguf_kv("tokenizer.ggml.model", "str", "gpt2"), gguf_kv("tokenizer.ggml.pre", "str", "gpt2"),
               gguf_kv("tokenizer.ggml.tokens", "arr", ("str", tokens)),
               gguf_kv("tokenizer.ggml.token_type", "arr", ("i32", types)),
               gguf_kv("tokenizer.ggml.merges", "arr", ("str", ["Ġ t", "h e", "Ġt he"])),
               gguf_kv("tokenizer.ggml.bos_token_id", "u32", 259), gguf_kv("tokenizer.ggml.eos_token_id", "u32", 259)]
    else:
        spm = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["▁", "▁t", "he"]
        kv += [gguf_kv("tokenizer.ggml.model", "str", "llama"), gguf_kv("tokenizer.ggml.tokens", "arr", ("str", spm)),
               gguf_kv("tokenizer.ggml.scores", "arr", ("f32", [0.0] * 259 + [-1.0, -2.0, -3.0])),
               gguf_kv("tokenizer.ggml.token_type", "arr", ("i32", [2, 3, 3] + [6] * 256 + [1, 1, 1])),
               gguf_kv("tokenizer.ggml.bos_token_id", "u32", 1), gguf_kv("tokenizer.ggml.eos_token_id", "u32", 2)]
        vocab = len(spm)
    if template:
        kv.append(gguf_kv("tokenizer.chat_template", "str",
                          "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
                          "{% if add_generation_prompt %}<|assistant|>{% endif %}"))
    shapes = {"token_embd.weight": [hidden, vocab], "output_norm.weight": [hidden], "output.weight": [hidden, vocab],
              "blk.0.attn_norm.weight": [hidden], "blk.0.ffn_norm.weight": [hidden],
              "blk.0.attn_q.weight": [hidden, hidden], "blk.0.attn_k.weight": [hidden, kv_heads * head_dim],
              "blk.0.attn_v.weight": [hidden, kv_heads * head_dim], "blk.0.attn_output.weight": [hidden, hidden],
              "blk.0.ffn_gate.weight": [hidden, inter], "blk.0.ffn_up.weight": [hidden, inter],
              "blk.0.ffn_down.weight": [inter, hidden]}
    if arch == "qwen2":
        shapes.update({"blk.0.attn_q.bias": [hidden], "blk.0.attn_k.bias": [kv_heads * head_dim],
                       "blk.0.attn_v.bias": [kv_heads * head_dim]})
    infos, data = b"", b""
    for name, ne in shapes.items():
        n = math.prod(ne)
        vals = [1.0] * n if "norm" in name else [rng.uniform(-0.3, 0.3) for _ in range(n)]
        t = GGML_F32 if (len(ne) == 1 or "embd" in name) else qtype
        raw = {GGML_F32: lambda v: struct.pack(f"<{len(v)}f", *v), GGML_F16: lambda v: struct.pack(f"<{len(v)}e", *v),
               GGML_Q8_0: q8_0, GGML_Q4_0: q4_0}[t](vals)
        data += b"\0" * (-len(data) % 32)
        infos += gguf_str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne) + \
            struct.pack("<IQ", t, len(data))
        data += raw
    head = b"GGUF" + struct.pack("<IQQ", 3, len(shapes), len(kv)) + b"".join(kv) + infos
    head += b"\0" * (-len(head) % 32)
    img = head + data
    return mutate(img) if mutate else img


def gguf_seeds():
    clear_seeds("gguf")
    write("gguf", "llama-q8_0-gpt2", gguf_image())
    write("gguf", "llama-q4_0-spm", gguf_image(qtype=GGML_Q4_0, tokenizer="llama"))
    write("gguf", "qwen2-f16", gguf_image(arch="qwen2", qtype=GGML_F16, template=False))
    write("gguf", "llama-f32", gguf_image(qtype=GGML_F32))
    img = gguf_image()
    write("gguf", "truncated", img[:len(img) * 2 // 3])
    write("gguf", "header-only", img[:24])
    write("gguf", "huge-count", img[:8] + struct.pack("<Q", 1 << 62) + img[16:])
    # A token string that is not UTF-8 (same length, so every offset stays valid).
    at = img.index(gguf_str("he"))
    write("gguf", "bad-utf8-token", img[:at + 8] + b"\xffe" + img[at + 10:])


def grammar_seeds():
    """Grammar target: a kind byte (0 JSON Schema, 1 regex, 2 GBNF), a walk seed byte, the text."""
    clear_seeds("grammar")
    gdir = os.path.join(ROOT, "tests", "fixtures", "grammar")
    for i, f in enumerate(sorted(glob.glob(os.path.join(gdir, "json_schema", "*.json")))):
        with open(f, "rb") as fh:
            write("grammar", "schema-" + os.path.basename(f), bytes([0, i & 255]) + fh.read())
    with open(os.path.join(gdir, "regex.txt"), encoding="utf-8") as fh:
        lines = [l.rstrip("\n") for l in fh if l.strip() and not l.startswith("#")]
    for i, line in enumerate(lines):
        write("grammar", f"regex-{i:02d}", bytes([1, i & 255]) + line.encode("utf-8"))
    for f in sorted(glob.glob(os.path.join(gdir, "gbnf", "*.gbnf"))):
        with open(f, "rb") as fh:
            write("grammar", "gbnf-" + os.path.basename(f), bytes([2, 7]) + fh.read())
    # Broken variants: error paths from the start.
    write("grammar", "broken-schema", bytes([0, 1]) + b'{"type": "object", "properties": {"a": {"$ref": "#/nope"}}}')
    write("grammar", "broken-regex", bytes([1, 1]) + b"(a|b")
    write("grammar", "broken-gbnf", bytes([2, 1]) + b"root ::= item+\nitem ::= root")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixtures", default=os.path.join(ROOT, "build", "test_fixtures"),
                    help="the extracted fixture archives (<build>/test_fixtures)")
    a = ap.parse_args()
    http_seeds()
    api_seeds()
    tokenizer_seeds(a.fixtures)
    tokenizer_json_seeds()
    jinja_seeds(a.fixtures)
    chat_template_seeds(a.fixtures)
    model_config_seeds()
    safetensors_seeds()
    gguf_seeds()
    grammar_seeds()
    for t in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, t))
        size = sum(os.path.getsize(os.path.join(CORPUS, t, f)) for f in files)
        print(f"{t:16s} {len(files):5d} files {size / 1024:8.1f} KiB")


if __name__ == "__main__":
    main()
