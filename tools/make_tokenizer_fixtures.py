#!/usr/bin/env python3
"""Writes flashgen's tokenizer parity fixtures from Hugging Face `tokenizers`.

For every tokenizer folder of tests/fixtures/tokenizers.tar.xz (extracted by CMake into
<build>/test_fixtures/tokenizers/) it encodes a corpus (with and
without special tokens) and decodes the ids (keeping and skipping special tokens), plus random
id lists, and writes tests/fixtures/tokenizer/<name>.json. It also builds small synthetic
tokenizers (a byte-level and a SentencePiece-style BPE trained here on the corpus) and runs them
through many normalizer / pre-tokenizer / decoder / added-token configurations, written to
tests/fixtures/tokenizer/synthetic.json. The C++ tests assemble the same tokenizer JSON and must
reproduce every expectation exactly.

Inputs that are not valid UTF-8 are stored as hex; Hugging Face only accepts str, so their
expectations are computed on bytes.decode("utf-8", "replace"), the repair flashgen applies.

Usage: python3 tools/make_tokenizer_fixtures.py [--fixtures build/test_fixtures] [--out tests/fixtures/tokenizer]
Needs: pip install tokenizers
"""
import argparse
import copy
import json
import os
import random

import tokenizers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

# ---------------------------------------------------------------------------------------------
# Corpus. Each entry is str (valid UTF-8) or bytes (possibly invalid UTF-8).

def corpus():
    c = [
        "",
        " ",
        "  ",
        "\t",
        "\n",
        "\n\n\n",
        " \n \t\r\n",
        "Hello world",
        " Hello world",
        "Hello, world! How are you doing today?",
        "I'm sure they'll say we've done it; you'd think she's right. THEY'LL SAY WE'VE",
        "The quick brown fox jumps over the lazy dog. 1234567890",
        "Numbers: 3 33 333 3333 33333 3.14159 -42 1,000,000 0x1F 1e-9 ½ ² ٣٤٥ 一二三",
        "Ünïcödé: Äpfel, Straße, façade, naïve, coöperate, ǅ, ﬁ ligature, Ａ full-width",
        "Français : « Où est la bibliothèque ? » — c'est là-bas.",
        "Русский текст: Съешь же ещё этих мягких французских булок.",
        "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. ΣΊΣΥΦΟΣ ὀδυσσεύς",
        "中文：我想在苹果公司工作。机器学习很有趣！",
        "日本語：いろはにほへと ちりぬるを カタカナ ｶﾀｶﾅ 漢字",
        "한국어: 다람쥐 헌 쳇바퀴에 타고파",
        "العربية: نص عربي مع أرقام ١٢٣ وعلامات.",
        "עברית: טקסט בעברית",
        "हिन्दी: नमस्ते दुनिया, यह एक परीक्षण है।",
        "ไทย: สวัสดีครับ ภาษาไทยไม่มีช่องว่าง",
        "ភាសាខ្មែរ កាន់តែពិសេសអាចខលចេញ",
        "Tiếng Việt: Cửa Việt, người Việt Nam",
        "Emoji: 🚀 🦙 😶‍🌫️ 👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 ❤️ 🇫🇷 ✅",
        "Combining: e\u0301 a\u0308 o\u0303 \u212b \u00c5 A\u030a \ufb01 \u2460 \u3000x",
        "Zero-width: a\u200bb c\u200dd \ufeffBOM e\u00a0f g\u2009h i\u202fj",
        "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
        "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
        "const x = {a: [1, 2, 3], 'b': \"c\"}; // comment\n/* block */ x?.a ?? null;",
        "SELECT * FROM users WHERE id = 1 AND name LIKE '%o''brien%';",
        "<html><body class=\"main\">&amp; &lt;tag&gt; &#x27;</body></html>",
        "{\"key\": \"value\", \"list\": [true, false, null], \"n\": -1.5e10}",
        "path/to/file_name-v2.tar.gz C:\\Users\\name\\file.txt https://example.com/a?b=c&d=e#f",
        "    four leading spaces\n        eight\n\t\ttabs\t\tinside\t",
        "trailing spaces     ",
        "a  b   c    d     e      f       g",
        "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n",
        "line1\r\nline2\rline3\n\rline4",
        "!!!!!! ????? ...... ------ ====== ****** ~~~~~ ______",
        "'s 't 're 've 'm 'll 'd 'S 'T 'RE ' s",
        "ſ long s, K kelvin, İstanbul, ΣΑΣ, ß, ǰ",
        "Special tokens in text: <|endoftext|> <s> </s> <unk> <pad> [INST] [/INST]",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
        "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n4<|end|><|endoftext|>",
        "text<|endoftext|>text <|endoftext|> text  <|endoftext|>  text",
        "<s>[INST] Hello [/INST] Hi</s>  <s>  x",
        "almost special: <|endoftext| <|im_start <s </s <|user| <|end",
        "\\xff\\xfe escaped-looking bytes \\u00e9 %C3%A9 &#233;",
        "Mixed: naïve café 東京 🚀 123 <tag> ' \" ` \u00ad soft hyphen",
        "Ⅻ ⅻ ① ⑵ ⒊ ¼ ¾ ⁴ ₅",
        "\u0000 \u0001 \u001f \u007f \u0080 \u009f control chars",
        "\ufffd replacement char and \U0001F600 and \U0010FFFD private",
        "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
        Runs([("x", 3000)]),
        Runs([("ab", 1500)]),
        Runs([(" ", 2000)]),
        Runs([("\n", 500)]),
        Runs([("\t ", 300)]),
        Runs([("9", 1000)]),
        Runs([("🚀", 300)]),
        Runs([("漢", 600)]),
        Runs([("a", 200), (" ", 200), ("b", 200), ("\n", 50), ("c", 100)]),
        Runs([("Hello", 1), (" ", 700), ("world", 1), ("<|endoftext|>", 40), ("<s>", 40)]),
        "".join(chr(0x61 + (i * 7) % 26) for i in range(5000)),
    ]
    c += [
        b"invalid \xff\xfe bytes",
        b"truncated \xe2\x82 euro",
        b"lone continuation \x80\x81 x",
        b"overlong \xc0\xaf and surrogate \xed\xa0\x80 end",
        b"\xf4\x90\x80\x80 above U+10FFFF",
        b"mixed \xe2\x82\xac valid \xe2\x82 invalid \xf0\x9f\x9a\x80 rocket \xf0\x9f",
        bytes(range(256)),
    ]
    return c


class Runs:
    """A long input stored compactly as [unit, count] runs."""

    def __init__(self, runs):
        self.runs = runs

    def text(self):
        return "".join(u * n for u, n in self.runs)


def as_str(x):
    if isinstance(x, Runs):
        return x.text()
    return x.decode("utf-8", "replace") if isinstance(x, bytes) else x


def case_input(x):
    if isinstance(x, Runs):
        return {"input_runs": [[u, n] for u, n in x.runs]}
    if isinstance(x, bytes):
        try:
            return {"input": x.decode("utf-8")}
        except UnicodeDecodeError:
            return {"input_hex": x.hex()}
    return {"input": x}


def random_id_lists(tok, rng, n_lists=12):
    vocab = tok.get_vocab_size(with_added_tokens=True)
    specials = [t.content for t in tok.get_added_tokens_decoder().values()]
    special_ids = [tok.token_to_id(s) for s in specials if tok.token_to_id(s) is not None]
    byte_ids = [tok.token_to_id("<0x%02X>" % b) for b in range(256)]
    byte_ids = [i for i in byte_ids if i is not None]
    out = []
    for k in range(n_lists):
        n = rng.randint(1, 40)
        ids = []
        for _ in range(n):
            r = rng.random()
            if r < 0.1 and special_ids:
                ids.append(rng.choice(special_ids))
            elif r < 0.3 and byte_ids:
                ids.append(rng.choice(byte_ids))
            else:
                ids.append(rng.randrange(vocab))
        out.append(ids)
    # Id lists around the edges of decoders: only byte tokens, leading spaces, one token.
    if byte_ids:
        out.append([tok.token_to_id("<0xE2>"), tok.token_to_id("<0x82>"), tok.token_to_id("<0xAC>")])
        out.append([tok.token_to_id("<0xE2>"), tok.token_to_id("<0x82>")])
    out.append([0])
    out.append([])
    return out


def tokenizer_cases(tok, texts, rng):
    cases = []
    for x in texts:
        s = as_str(x)
        ids = tok.encode(s, add_special_tokens=False).ids
        ids_special = tok.encode(s, add_special_tokens=True).ids
        case = case_input(x)
        case["ids"] = ids
        if ids_special != ids:  # stored only where the post-processor added something
            case["ids_special"] = ids_special
        # Decoded texts are stored only where they differ from the input / from "decoded".
        decoded = tok.decode(ids_special, skip_special_tokens=False)
        decoded_skip = tok.decode(ids_special, skip_special_tokens=True)
        if decoded != s:
            case["decoded"] = decoded
        if decoded_skip != decoded:
            case["decoded_skip"] = decoded_skip
        cases.append(case)
    decode_cases = []
    for ids in random_id_lists(tok, rng):
        decode_cases.append({
            "ids": ids,
            "text": tok.decode(ids, skip_special_tokens=False),
            "text_skip": tok.decode(ids, skip_special_tokens=True),
        })
    return cases, decode_cases


# ---------------------------------------------------------------------------------------------
# Synthetic tokenizers: small models trained here, many component configurations.

SYN_ADDED = [
    {"content": "<bos>", "special": True},
    {"content": "<eos>", "special": True},
    {"content": "[MASK]", "special": True, "lstrip": True, "rstrip": True},
    {"content": "<word>", "special": False, "single_word": True},
    {"content": "@@", "special": False, "rstrip": True},
    {"content": "##", "special": False, "lstrip": True},
    {"content": "héllo", "special": False, "normalized": True},
    {"content": "ab", "special": False, "normalized": True},
    {"content": "<|long token|>", "special": True},
    {"content": "<|long", "special": True},
]

SYN_TEXTS = [
    "Hello héllo HÉLLO Hello@@ world ## x [MASK] y  [MASK]  z",
    "<bos>text<eos> <word> a<word>b <word>. _<word>_ é<word> 1<word>",
    "ab abab cab <|long token|> <|long <|long token| x",
    "  [MASK]\t\n@@  \n  ##",
    "The year 2024: 3.14, 1,000; (a+b)=c! \"quoted\" it's — done…",
    "CamelCaseWord snake_case_word kebab-case-word 123abc abc123",
    "ﬁne Ａ ① ½ e\u0301 Å Ω ǅ İ ΣΑΣ",
    "   leading and trailing   ",
    "tabs\tand\nnewlines\r\nhere",
    "日本語 한국어 中文 русский عربي",
    "🚀🦙 emoji 😶‍🌫️!",
    "x" * 300,
    "a, b. c; d: e! f? g",
    "",
    " ",
    "▁already▁has▁meta",
]


def train_byte_level(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=420, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return json.loads(tok.to_str())["model"]


def train_sentencepiece_like(texts):
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=380, special_tokens=["<unk>"], show_progress=False,
                                  limit_alphabet=120)
    tok.train_from_iterator(texts, trainer)
    model = json.loads(tok.to_str())["model"]
    next_id = max(model["vocab"].values()) + 1
    for b in range(256):
        name = "<0x%02X>" % b
        if name not in model["vocab"]:
            model["vocab"][name] = next_id
            next_id += 1
    return model


def added_tokens_json(first_id):
    out = []
    for k, a in enumerate(SYN_ADDED):
        out.append({
            "id": first_id + k,
            "content": a["content"],
            "single_word": a.get("single_word", False),
            "lstrip": a.get("lstrip", False),
            "rstrip": a.get("rstrip", False),
            "normalized": a.get("normalized", False),
            "special": a.get("special", False),
        })
    return out


def regex(p):
    return {"Regex": p}


def string(p):
    return {"String": p}


BL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
BL_DEC = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
SP_DEC = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": string("\u2581"), "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def seq(*pts):
    return {"type": "Sequence", "pretokenizers": list(pts)}


def split(pattern, behavior, invert=False):
    return {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert}


def template(first_id):
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "<eos>", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<bos>": {"id": "<bos>", "ids": [first_id], "tokens": ["<bos>"]},
                               "<eos>": {"id": "<eos>", "ids": [first_id + 1], "tokens": ["<eos>"]}}}


def synthetic_variants(bl_first, sp_first):
    nfkc_lower = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}
    v = []
    bl = lambda name, pre, norm=None, post=None, dec=BL_DEC: v.append(
        {"name": name, "model": "byte_level", "normalizer": norm, "pre_tokenizer": pre,
         "post_processor": post, "decoder": dec})
    sp = lambda name, pre, norm=None, post=None, dec=SP_DEC: v.append(
        {"name": name, "model": "sentencepiece", "normalizer": norm, "pre_tokenizer": pre,
         "post_processor": post, "decoder": dec})
    bl("bytelevel_regex_prefix", {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
       post=template(bl_first))
    bl("nfkc_lowercase", seq(split(regex(r"\s+"), "Removed"), BL), norm=nfkc_lower)
    bl("nfd_strip_accents", seq(split(regex(r"\p{P}"), "Isolated"), BL),
       norm={"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}, {"type": "NFC"}]})
    bl("nfkd_strip", seq(split(regex(r"[,.;:]"), "MergedWithPrevious"), BL),
       norm={"type": "Sequence", "normalizers": [{"type": "NFKD"},
                                                  {"type": "Strip", "strip_left": True, "strip_right": True}]})
    bl("strip_left_replace_regex", seq(split(string(" "), "MergedWithNext"), BL),
       norm={"type": "Sequence", "normalizers": [{"type": "Strip", "strip_left": True, "strip_right": False},
                                                  {"type": "Replace", "pattern": regex(r"\d+"), "content": "#"}]})
    bl("split_contiguous_invert", seq(split(regex(r"\p{L}+"), "Contiguous", True), BL))
    bl("split_isolated_invert", seq(split(regex(r"[aeiou]"), "Isolated", True), BL))
    bl("split_removed_invert", seq(split(regex(r"\w+"), "Removed", True), BL))
    bl("digits_individual_punct", seq({"type": "Digits", "individual_digits": True},
                                      {"type": "Punctuation", "behavior": "Isolated"}, BL))
    bl("digits_contiguous_punct_prev", seq({"type": "Digits", "individual_digits": False},
                                           {"type": "Punctuation", "behavior": "MergedWithPrevious"}, BL))
    bl("punct_next_contiguous", seq({"type": "Punctuation", "behavior": "MergedWithNext"},
                                    {"type": "Punctuation", "behavior": "Contiguous"}, BL))
    bl("whitespace", seq({"type": "Whitespace"}, BL))
    bl("whitespace_split", seq({"type": "WhitespaceSplit"}, BL))
    bl("bert_pre_tokenizer", seq({"type": "BertPreTokenizer"}, BL))
    bl("llama3_like", seq(split(regex(
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
        "Isolated"), BL), post={"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            template(bl_first)]})
    bl("bytelevel_seq_prefix_space", seq(split(regex(r"[.!?]"), "MergedWithPrevious"),
                                         {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}))
    bl("roberta", {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
       post={"type": "RobertaProcessing", "sep": ["<eos>", bl_first + 1], "cls": ["<bos>", bl_first],
             "trim_offsets": True, "add_prefix_space": False})
    bl("no_decoder", seq({"type": "WhitespaceSplit"}, BL), dec=None)
    sp("metaspace_always_split", {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True})
    sp("metaspace_first_nosplit", {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
       post=template(sp_first))
    sp("metaspace_never", {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": True},
       dec={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": True})
    sp("metaspace_decoder_always", {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
       dec={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True})
    sp("legacy_prepend_replace", None,
       norm={"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                  {"type": "Replace", "pattern": string(" "), "content": "\u2581"}]})
    sp("sp_split_first", seq(split(regex(r"\p{N}"), "Isolated"),
                             {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}),
       dec={"type": "Sequence", "decoders": [{"type": "Replace", "pattern": regex("\u2581+"), "content": " "},
                                             {"type": "ByteFallback"}, {"type": "Fuse"},
                                             {"type": "Strip", "content": " ", "start": 2, "stop": 0}]})
    return v


def build_synthetic(model, added, variant, no_fallback=False):
    m = copy.deepcopy(model)
    if no_fallback:
        m["byte_fallback"] = False
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": variant["normalizer"], "pre_tokenizer": variant["pre_tokenizer"],
            "post_processor": variant["post_processor"], "decoder": variant["decoder"], "model": m}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=os.path.join(here, "..", "build", "test_fixtures"),
                    help="the extracted fixture archives (tokenizers/)")
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "tokenizer"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    texts = corpus()
    meta = {"generator": "tools/make_tokenizer_fixtures.py", "tokenizers_version": tokenizers.__version__}

    tok_root = os.path.join(args.fixtures, "tokenizers")
    for name in sorted(os.listdir(tok_root)):
        path = os.path.join(tok_root, name, "tokenizer.json")
        if not os.path.exists(path):
            continue
        tok = Tokenizer.from_file(path)
        rng = random.Random(name)
        cases, decode_cases = tokenizer_cases(tok, texts, rng)
        doc = dict(meta, tokenizer=name, cases=cases, decode_cases=decode_cases)
        with open(os.path.join(args.out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        print(name, len(cases), "cases")

    train_texts = [as_str(x) for x in texts if not isinstance(x, Runs) and len(as_str(x)) < 400] + SYN_TEXTS[:-5]
    bl_model = train_byte_level(train_texts)
    sp_model = train_sentencepiece_like(train_texts)
    bl_first = max(bl_model["vocab"].values()) + 1
    sp_first = max(sp_model["vocab"].values()) + 1
    syn_texts = SYN_TEXTS + [x for x in texts if not isinstance(x, Runs) and len(as_str(x)) < 400][:: 3]
    variants_out = []
    variants = synthetic_variants(bl_first, sp_first)
    # Unknown-token handling without byte fallback: fused and not fused.
    for fuse in (True, False):
        variants.append({"name": "sp_unk_fuse_%s" % str(fuse).lower(), "model": "sentencepiece_unk_fuse_%s" % fuse,
                         "normalizer": None, "decoder": SP_DEC, "post_processor": None,
                         "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                                           "split": True}})
    for variant in variants:
        if variant["model"] == "byte_level":
            model, first = bl_model, bl_first
        else:
            model, first = sp_model, sp_first
        full = build_synthetic(model, added_tokens_json(first), variant)
        if variant["model"].startswith("sentencepiece_unk"):
            full["model"]["byte_fallback"] = False
            full["model"]["fuse_unk"] = variant["model"].endswith("True")
            full["model"]["vocab"] = {k: v for k, v in full["model"]["vocab"].items() if not k.startswith("<0x")}
        tok = Tokenizer.from_str(json.dumps(full))
        rng = random.Random(variant["name"])
        cases, decode_cases = tokenizer_cases(tok, syn_texts, rng)
        parts = {k: full[k] for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder")}
        model_patch = {}
        if variant["model"].startswith("sentencepiece_unk"):
            model_patch = {"byte_fallback": False, "fuse_unk": full["model"]["fuse_unk"], "drop_byte_tokens": True}
        variants_out.append({"name": variant["name"], "model": "byte_level" if variant["model"] == "byte_level"
                             else "sentencepiece", "model_patch": model_patch, "components": parts,
                             "cases": cases, "decode_cases": decode_cases})
    doc = dict(meta, added_tokens={"byte_level": added_tokens_json(bl_first),
                                   "sentencepiece": added_tokens_json(sp_first)},
               models={"byte_level": bl_model, "sentencepiece": sp_model}, variants=variants_out)
    with open(os.path.join(args.out, "synthetic.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print("synthetic", len(variants_out), "variants")


if __name__ == "__main__":
    main()
