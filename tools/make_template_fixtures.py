#!/usr/bin/env python3
"""Make the chat-template expectations that flashgen's template engine is tested against.

For every `*.jinja` of tests/fixtures/chat_templates.tar.xz (extracted by CMake into
<build>/test_fixtures/chat_templates/) this renders a fixed set of
conversations with Hugging Face transformers' own chat-template renderer (Jinja2 3.1.6,
sandboxed, trim_blocks + lstrip_blocks + loopcontrols, transformers' tojson / raise_exception /
strftime_now) and writes one JSON file per template under tests/fixtures/chat_templates/:

    {"template": "<file name>", "cases": [
        {"conversation": "<name>", "add_generation_prompt": true, "extra": {...},
         "output": "<rendered text>"}            # or, when the reference raises:
        {..., "error": "<exception type>: <message>"}]}

The conversations themselves go to tests/fixtures/chat_templates/conversations.json, so the C++
test feeds the engine exactly what the reference saw. strftime_now is pinned to kFixedNow.

Usage (needs `pip install jinja2==3.1.6 transformers`; torch is not needed):
    python3 tools/make_template_fixtures.py [--fixtures build/test_fixtures] [--out tests/fixtures/chat_templates]
"""
import argparse
import datetime as _dt
import json
import os
import sys

import jinja2

from transformers.utils import chat_template_utils as ctu

kFixedNow = _dt.datetime(2025, 3, 14, 9, 26, 53)

# The special-token strings every render sees (transformers passes the tokenizer's named
# special tokens as template variables).
kSpecialTokens = {
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "pad_token": "<pad>",
}

kTools = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                             "description": "Temperature unit"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "number", "description": "First addend"},
                    "b": {"type": "integer", "description": "Second addend"},
                },
                "required": ["a", "b"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "lookup_profile",
            "description": "Look up a user's <profile> & \"settings\".",
            "parameters": {
                "type": "object",
                "properties": {
                    "user_id": {"type": "string"},
                    "fields": {"type": "array", "items": {"type": "string"}, "description": "Fields to return"},
                    "limit": {"type": "integer", "default": 10},
                },
                "required": ["user_id"],
            },
        },
    },
]

kConversations = {
    "system_user": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France?"},
    ],
    "user_only": [
        {"role": "user", "content": "Hello!"},
    ],
    "multi_turn": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a prime number."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "  Another one, please.\n"},
    ],
    "multi_turn_no_system": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
        {"role": "assistant", "content": "Why did the chicken cross the road?"},
    ],
    "non_ascii": [
        {"role": "system", "content": "Réponds en français, s'il te plaît."},
        {"role": "user", "content": "Привет, 世界! 🙂 Ça va? \"quotes\" and \\backslash\\ and <tags>"},
        {"role": "assistant", "content": "Très bien — merci! 日本語も話せます。"},
        {"role": "user", "content": "Tab\there, emoji 👩‍💻, 한국어."},
    ],
    "tools_only": [
        {"role": "user", "content": "What's the weather in Paris?"},
    ],
    "tool_call": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What's the weather in Zürich, and what is 2 + 3?"},
        {"role": "assistant", "content": "",
         "tool_calls": [
             {"id": "call_1", "type": "function",
              "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}},
             {"id": "call_2", "type": "function",
              "function": {"name": "add", "arguments": {"a": 2, "b": 3}}},
         ]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
         "content": "{\"temperature\": 21.5, \"condition\": \"sunny\"}"},
        {"role": "tool", "tool_call_id": "call_2", "name": "add", "content": "5"},
    ],
    "tool_call_answered": [
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": None,
         "tool_calls": [
             {"id": "call_9", "type": "function",
              "function": {"name": "add", "arguments": {"a": 2, "b": 3}}},
         ]},
        {"role": "tool", "tool_call_id": "call_9", "name": "add", "content": "5"},
        {"role": "assistant", "content": "2 + 3 = 5."},
    ],
    "tool_call_string_args": [
        {"role": "user", "content": "Look up user 42."},
        {"role": "assistant", "content": "Sure.",
         "tool_calls": [
             {"id": "call_3", "type": "function",
              "function": {"name": "lookup_profile",
                           "arguments": "{\"user_id\": \"42\", \"fields\": [\"name\"]}"}},
         ]},
        {"role": "tool", "tool_call_id": "call_3", "name": "lookup_profile",
         "content": "{\"name\": \"Zoë\"}"},
    ],
    "reasoning": [
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "reasoning_content": "91 = 7 * 13.", "content": "No, 91 = 7 × 13."},
        {"role": "user", "content": "And 97?"},
    ],
    "content_parts": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": "a cat."}]},
    ],
}

# (conversation, add_generation_prompt, with tools, extra template variables)
kCases = [
    ("system_user", False, False, {}),
    ("system_user", True, False, {}),
    ("user_only", True, False, {}),
    ("multi_turn", True, False, {}),
    ("multi_turn_no_system", False, False, {}),
    ("non_ascii", True, False, {}),
    ("tools_only", True, True, {}),
    ("tool_call", True, True, {}),
    ("tool_call_answered", False, True, {}),
    ("reasoning", True, False, {}),
    ("content_parts", True, False, {}),
    ("system_user", True, False, {"enable_thinking": False}),
    ("tools_only", False, True, {}),
    ("tool_call_string_args", True, True, {}),
    ("reasoning", False, False, {"enable_thinking": True}),
]


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return kFixedNow


def render(template, conversation, add_generation_prompt, tools, extra):
    # The same steps as transformers' apply_chat_template(..., tokenize=False).
    chat = ctu._normalize_chat_messages(conversation)
    kwargs = {**kSpecialTokens, **extra}
    rendered, _ = ctu.render_jinja_template(
        conversations=[chat], tools=tools, documents=None, chat_template=template,
        add_generation_prompt=add_generation_prompt, **kwargs)
    return rendered[0]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(here)
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default=os.path.join(repo, "build", "test_fixtures"),
                    help="the extracted fixture archives (chat_templates/, tokenizers/)")
    ap.add_argument("--out", default=os.path.join(repo, "tests", "fixtures", "chat_templates"))
    args = ap.parse_args()
    if jinja2.__version__ != "3.1.6":
        print(f"warning: expectations were made with jinja2 3.1.6, this is {jinja2.__version__}",
              file=sys.stderr)
    ctu.datetime = _FixedDatetime

    src = os.path.join(args.fixtures, "chat_templates")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "conversations.json"), "w", encoding="utf-8") as f:
        json.dump({"fixed_now": kFixedNow.isoformat(), "special_tokens": kSpecialTokens,
                   "tools": kTools, "conversations": kConversations}, f, ensure_ascii=False, indent=1)
        f.write("\n")

    n_ok = n_err = 0
    for name in sorted(os.listdir(src)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(src, name), encoding="utf-8", newline="") as f:
            template = f.read()
        cases = []
        for conv, agp, with_tools, extra in kCases:
            case = {"conversation": conv, "add_generation_prompt": agp, "tools": with_tools,
                    "extra": extra}
            try:
                case["output"] = render(template, kConversations[conv], agp,
                                        kTools if with_tools else None, extra)
                n_ok += 1
            except Exception as e:  # the reference's failure is an expectation too
                case["error"] = f"{type(e).__name__}: {e}"
                n_err += 1
            cases.append(case)
        out = os.path.join(args.out, name[: -len(".jinja")] + ".json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"template": name, "cases": cases}, f, ensure_ascii=False, indent=1)
            f.write("\n")
    print(f"{n_ok} renders, {n_err} reference errors -> {args.out}")
    make_tokenizer_config_expectations(args)


def make_tokenizer_config_expectations(args):
    # The model-folder loader: transformers' own AutoTokenizer + apply_chat_template on every
    # reference tokenizer folder whose tokenizer_config.json has a chat_template.
    from transformers import AutoTokenizer

    root = os.path.join(args.fixtures, "tokenizers")
    result = {}
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
            if json.load(f).get("chat_template") is None:
                continue
        tok = AutoTokenizer.from_pretrained(folder)
        cases = []
        for conv, agp, with_tools in [("system_user", True, False), ("multi_turn", False, False),
                                      ("non_ascii", True, False), ("tool_call", True, True)]:
            case = {"conversation": conv, "add_generation_prompt": agp, "tools": with_tools}
            try:
                case["output"] = tok.apply_chat_template(
                    kConversations[conv], tools=kTools if with_tools else None,
                    add_generation_prompt=agp, tokenize=False)
            except Exception as e:
                case["error"] = f"{type(e).__name__}: {e}"
            cases.append(case)
        result[name] = {"special_tokens": tok.special_tokens_map, "cases": cases}
    with open(os.path.join(args.out, "tokenizer_configs.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(result)} tokenizer_config.json chat templates -> tokenizer_configs.json")


if __name__ == "__main__":
    main()
