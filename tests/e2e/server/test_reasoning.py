"""Reasoning output through `flashgen serve` and the OpenAI SDK: a thinking model's <think> block
comes back as `message.reasoning_content` / `delta.reasoning_content` and the rest as content,
with real thinking models' chat templates (from the test fixtures): Qwen3's, whose replies write
the block themselves (here forced with a GBNF grammar, since the fixture model writes noise), and
DeepSeek-R1's, whose generation prompt opens the block (so a reply cut off by max_tokens is all
reasoning). `--reasoning-parser none` leaves the block in the content."""
import os

import openai
import pytest

from conftest import FLASHGEN, MODEL_NAME, Server

TEMPLATES = os.path.join(os.path.dirname(FLASHGEN), "test_fixtures", "chat_templates")
QWEN3 = os.path.join(TEMPLATES, "Qwen-Qwen3-0.6B.jinja")
R1 = os.path.join(TEMPLATES, "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja")

# The block, then an answer: what a thinking model writes.
THINKING = r'''root ::= "<think>\n" thought "\n</think>\n\n" answer
thought ::= "I should say " word "."
answer ::= "The answer is " word "."
word ::= [a-z] [a-z] [a-z]'''


def client_of(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def start(tokenizer_dir, model_dir, template, *extra):
    return Server(tokenizer_dir, ["--chat-template", template, "--kv-cache-memory", "16MiB", *extra],
                  model_dir=model_dir)


@pytest.fixture(scope="module")
def qwen3(tokenizer_dir, long_context_model):
    s = start(tokenizer_dir, long_context_model, QWEN3)
    yield s
    s.kill()


def streamed(stream):
    reasoning, content, finish = "", "", None
    for ch in stream:
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        r = (d.model_extra or {}).get("reasoning_content")
        if r:
            assert not content, "reasoning after content"
            reasoning += r
        content += d.content or ""
        finish = ch.choices[0].finish_reason or finish
    return reasoning, content, finish


def test_the_block_comes_back_as_reasoning_content(qwen3):
    assert any("reasoning_content" in line for line in qwen3.lines), "the server did not say it splits reasoning"
    c = client_of(qwen3)
    msgs = [{"role": "user", "content": "Say a word."}]
    r = c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=80, temperature=1.0, seed=3,
                                  extra_body={"grammar": THINKING})
    m = r.choices[0].message
    reasoning = m.model_extra["reasoning_content"]
    assert reasoning.startswith("I should say ") and len(reasoning) == len("I should say abc."), reasoning
    assert m.content.startswith("The answer is ") and "<think>" not in m.content, m.content
    assert r.choices[0].finish_reason == "stop"
    # Streamed, the same seed gives the same two parts.
    s = c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=80, temperature=1.0, seed=3,
                                  extra_body={"grammar": THINKING}, stream=True)
    assert streamed(s) == (reasoning, m.content, "stop")
    # The reply goes back into the history as the template expects it (reasoning_content) and the
    # conversation goes on.
    more = msgs + [{"role": "assistant", "content": m.content, "reasoning_content": reasoning},
                   {"role": "user", "content": "Again."}]
    again = c.chat.completions.create(model=MODEL_NAME, messages=more, max_tokens=80, temperature=0,
                                      extra_body={"grammar": THINKING})
    assert again.choices[0].message.model_extra["reasoning_content"].startswith("I should say ")


def test_output_without_a_block_is_plain_content(qwen3):
    r = client_of(qwen3).chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=30, temperature=1.0, seed=5,
        extra_body={"grammar": 'root ::= "Plain " [a-z] [a-z] [a-z]'})
    assert r.choices[0].message.content.startswith("Plain ")
    assert "reasoning_content" not in (r.choices[0].message.model_extra or {})


def test_prompt_opened_block_cut_off_is_all_reasoning(tokenizer_dir, long_context_model):
    s = start(tokenizer_dir, long_context_model, R1)
    try:
        c = client_of(s)
        msgs = [{"role": "user", "content": "Think."}]
        r = c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=12, temperature=0)
        m = r.choices[0].message
        assert r.choices[0].finish_reason == "length"
        assert m.content == "", m
        reasoning = m.model_extra["reasoning_content"]
        assert reasoning and reasoning == reasoning.strip()
        assert streamed(c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=12, temperature=0,
                                                  stream=True)) == (reasoning, "", "length")
        dropped = c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=12, temperature=0,
                                            extra_body={"include_reasoning": False})
        assert dropped.choices[0].message.content == ""
        assert "reasoning_content" not in (dropped.choices[0].message.model_extra or {})
    finally:
        s.kill()
    # The parser off: the same reply is all content, as generated.
    s = start(tokenizer_dir, long_context_model, R1, "--reasoning-parser", "none")
    try:
        r = client_of(s).chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=12, temperature=0)
        assert "reasoning_content" not in (r.choices[0].message.model_extra or {})
        assert r.choices[0].message.content.strip() == reasoning
    finally:
        s.kill()
