"""Structured output and tool calls through `flashgen serve`, with the OpenAI SDK and TGI's API:
response_format json_object / json_schema (including the SDK's .parse() with a Pydantic model, on
the default model), TGI `parameters.grammar` (json and regex), the GBNF `grammar` field, refusals
of unsupported schema keywords naming them, tool calls with tool_choice required / named / auto
(non-streaming and streaming tool-call deltas) whose arguments validate against the tools'
schemas, jump-forward on and off giving the same reply, and the jump-forward counter in /metrics.
Tool calls are served with a Hermes-style chat template (Qwen2.5's, from the test fixtures)."""
import json
import os
import re

import jsonschema
import openai
import pydantic
import pytest
import requests

from conftest import FLASHGEN, MODEL_DIR, MODEL_NAME, SOURCE_DIR, Server

TEMPLATES = os.path.join(os.path.dirname(FLASHGEN), "test_fixtures", "chat_templates")
HERMES_TEMPLATE = os.path.join(TEMPLATES, "Qwen-Qwen2.5-7B-Instruct.jinja")
DEFAULT_MODEL = os.path.join(SOURCE_DIR, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 10},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "pet": {"enum": ["cat", "dog", "none"]}},
          "required": ["name", "age", "pet"], "additionalProperties": False}

WEATHER_TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "maxLength": 12},
                                      "unit": {"enum": ["celsius", "fahrenheit"]}},
                       "required": ["city", "unit"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Time in a zone",
        "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET", "PST"]}},
                       "required": ["zone"]}}},
]


def client_of(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def server(tokenizer_dir, long_context_model):
    s = Server(tokenizer_dir, ["--chat-template", HERMES_TEMPLATE, "--kv-cache-memory", "16MiB"],
               model_dir=long_context_model)
    yield s
    s.kill()


def test_json_schema_and_json_object_outputs_validate(server):
    c = client_of(server)
    for stream in (False, True):
        kwargs = dict(model=MODEL_NAME, messages=[{"role": "user", "content": "a person"}], max_tokens=120,
                      temperature=0.8, seed=3,
                      response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON,
                                                                               "strict": True}})
        if stream:
            text = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(stream=True, **kwargs))
        else:
            text = c.chat.completions.create(**kwargs).choices[0].message.content
        jsonschema.validate(json.loads(text), PERSON)
    r = c.completions.create(model=MODEL_NAME, prompt="{", max_tokens=100, temperature=0.7, seed=5,
                             extra_body={"response_format": {"type": "json_object"}})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].text), dict)


def test_tgi_grammar_json_and_regex(server):
    r = requests.post(server.url + "/generate", timeout=120, json={
        "inputs": "person:", "parameters": {"max_new_tokens": 120, "grammar": {"type": "json", "value": PERSON}}})
    assert r.status_code == 200, r.text
    value = json.loads(r.json()["generated_text"])
    jsonschema.validate(value, PERSON)
    assert list(value) == ["name", "age", "pet"], "properties come in the schema's order"
    pattern = r"(yes|no), [0-9]{2}\."
    r = requests.post(server.url + "/generate", timeout=120, json={
        "inputs": "answer:", "parameters": {"max_new_tokens": 40, "grammar": {"type": "regex", "value": pattern}}})
    assert r.status_code == 200, r.text
    assert re.fullmatch(pattern, r.json()["generated_text"]), r.json()


def test_gbnf_grammar_field(server):
    gbnf = 'root ::= "color: " ("red" | "green" | "blue") "!"'
    r = client_of(server).completions.create(model=MODEL_NAME, prompt="x", max_tokens=30, temperature=1.0, seed=1,
                                             extra_body={"grammar": gbnf})
    assert re.fullmatch(r"color: (red|green|blue)!", r.choices[0].text), r.choices[0].text


def test_unsupported_schema_keywords_are_refused_by_name(server):
    bad = {"type": "object", "properties": {"a": {"type": "string"}}, "patternProperties": {"^x": {}}}
    r = requests.post(server.url + "/v1/chat/completions", timeout=60, json={
        "model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": bad}}})
    assert r.status_code == 400, r.text
    assert "patternProperties" in r.json()["error"]["message"]
    r = requests.post(server.url + "/generate", timeout=60, json={
        "inputs": "x", "parameters": {"grammar": {"type": "regex", "value": "(a"}}})
    assert r.status_code in (400, 422), r.text


def validate_call(call):
    tool = {t["function"]["name"]: t["function"]["parameters"] for t in WEATHER_TOOLS}[call.function.name]
    jsonschema.validate(json.loads(call.function.arguments), tool)
    assert call.id.startswith("call_") and call.type == "function"


def test_tool_choice_required_and_named(server):
    c = client_of(server)
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = c.chat.completions.create(model=MODEL_NAME, messages=msgs, tools=WEATHER_TOOLS, tool_choice="required",
                                  max_tokens=150, temperature=0.9, seed=4)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.tool_calls
    for call in choice.message.tool_calls:
        validate_call(call)
    r = c.chat.completions.create(model=MODEL_NAME, messages=msgs, tools=WEATHER_TOOLS, max_tokens=150,
                                  tool_choice={"type": "function", "function": {"name": "get_time"}}, temperature=0)
    calls = r.choices[0].message.tool_calls
    assert calls and all(call.function.name == "get_time" for call in calls)
    for call in calls:
        validate_call(call)


def test_tool_calls_stream_as_deltas(server):
    c = client_of(server)
    stream = c.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "time?"}],
                                       tools=WEATHER_TOOLS, tool_choice="required", max_tokens=150, temperature=0,
                                       stream=True)
    calls, finish = {}, None
    for ch in stream:
        d = ch.choices[0].delta
        for tc in d.tool_calls or []:
            entry = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
            if tc.function.name:
                entry["name"] += tc.function.name
            entry["arguments"] += tc.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert calls
    for entry in calls.values():
        tool = {t["function"]["name"]: t["function"]["parameters"] for t in WEATHER_TOOLS}[entry["name"]]
        jsonschema.validate(json.loads(entry["arguments"]), tool)


def test_tool_choice_auto_and_bad_tool_choice(server):
    c = client_of(server)
    r = c.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}], tools=WEATHER_TOOLS,
                                  max_tokens=20, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    r = requests.post(server.url + "/v1/chat/completions", timeout=60, json={
        "model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "tools": WEATHER_TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "no_such_tool"}}})
    assert r.status_code == 400 and "no_such_tool" in r.text, r.text


def test_jump_forward_on_and_off_give_the_same_reply(server):
    c = client_of(server)
    out = []
    for jf in (True, False):
        r = c.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "a person"}], max_tokens=120, temperature=0,
            response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}},
            extra_body={"jump_forward": jf})
        out.append((r.choices[0].message.content, r.usage.completion_tokens))
    assert out[0] == out[1]
    m = server.metrics()
    assert m["flashgen_jump_forward_tokens_total"] > 0


@pytest.mark.skipif(not os.path.exists(DEFAULT_MODEL), reason=f"{DEFAULT_MODEL} not found: run ./scripts/setup.sh")
def test_sdk_parse_with_a_pydantic_model_on_the_default_model():
    class City(pydantic.BaseModel):
        name: str
        country: str
        population_millions: float

    s = Server(DEFAULT_MODEL, ["--kv-cache-memory", "64MiB"], model_dir=DEFAULT_MODEL)
    try:
        c = client_of(s)
        r = c.beta.chat.completions.parse(model=MODEL_NAME, temperature=0, max_tokens=100, response_format=City,
                                          messages=[{"role": "user", "content": "Describe Paris as JSON."}])
        city = r.choices[0].message.parsed
        assert isinstance(city, City), r.choices[0].message.content
        assert city.name
    finally:
        s.kill()
