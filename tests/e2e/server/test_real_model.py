"""The default model (models/SmolLM2-135M-Instruct.Q4_1.gguf, fetched by scripts/setup.sh) served by
`flashgen serve` on the CPU: chat replies through /v1/chat/completions with the OpenAI SDK, non-streaming
and streaming, equal transformers' greedy replies with the model's chat template applied
(tests/fixtures/real_model/reference.json, written by tools/make_real_model_refs.py). Also checks
that `generate` without --model uses the default model. Skipped when the model is missing."""
import json
import os
import subprocess

import openai
import pytest

from conftest import FLASHGEN, MODEL_NAME, SOURCE_DIR, Server

MODEL = os.path.join(SOURCE_DIR, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
REFERENCE = os.path.join(SOURCE_DIR, "tests", "fixtures", "real_model", "reference.json")

pytestmark = pytest.mark.skipif(
    not os.path.exists(MODEL), reason=f"{MODEL} not found: run ./scripts/setup.sh (or ./scripts/fetch-model.sh)")


@pytest.fixture(scope="module")
def reference():
    with open(REFERENCE, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def client():
    s = Server(MODEL, ["--kv-cache-memory", "64MiB"], model_dir=MODEL)
    yield openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    s.kill()


def test_chat_non_streaming_equals_transformers(client, reference):
    for chat in reference["chats"]:
        r = client.chat.completions.create(model=MODEL_NAME, messages=chat["messages"], max_tokens=chat["max_tokens"],
                                           temperature=0)
        assert r.choices[0].message.content == chat["reply_text"], chat["messages"]
        assert r.choices[0].finish_reason == chat["finish_reason"]
        assert r.usage.prompt_tokens == len(chat["prompt_ids"])
        assert r.usage.completion_tokens == len(chat["reply_ids"])


def test_chat_streaming_equals_transformers(client, reference):
    for chat in reference["chats"]:
        chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=chat["messages"],
                                                     max_tokens=chat["max_tokens"], temperature=0, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == chat["reply_text"], chat["messages"]
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == chat["finish_reason"]


def test_predicted_outputs_keep_the_reply_and_save_steps(client, reference):
    """`prediction` (OpenAI's predicted outputs) on a server that does not speculate otherwise: the
    reference reply as the prediction is drafted and accepted (at most 4 drafts a step, so about 4
    of every 5 tokens), an edited one is rejected at the edit and accepted around it, an unrelated
    one drafts nothing; the reply is transformers' every time."""
    for chat in reference["chats"]:
        kwargs = dict(model=MODEL_NAME, messages=chat["messages"], max_tokens=chat["max_tokens"], temperature=0)
        text = chat["reply_text"]
        words = text.split(" ")
        edited = " ".join(words[:len(words) // 2] + ["banana", "split"] + words[len(words) // 2 + 1:])
        got = {}
        for name, prediction in (("exact", text), ("edited", edited), ("unrelated", "Lorem ipsum dolor sit amet.")):
            r = client.chat.completions.create(prediction={"type": "content", "content": prediction}, **kwargs)
            assert r.choices[0].message.content == text, (name, chat["messages"])
            assert r.usage.completion_tokens == len(chat["reply_ids"])
            d = r.usage.completion_tokens_details
            got[name] = (d.accepted_prediction_tokens, d.rejected_prediction_tokens)
        n = len(chat["reply_ids"])
        assert got["exact"][0] >= (n - 1) * 3 // 5 and got["exact"][1] == 0, got
        assert got["edited"][0] > 0 and got["edited"][1] > 0, got
        assert got["unrelated"] == (0, 0), got


def test_generate_without_model_uses_the_default(reference):
    prompt = next(p for p in reference["prompts"] if p["name"] == "short")
    want = prompt["greedy_ids"][:6]
    # From another directory: the default is found beside the executable's build folder.
    r = subprocess.run([FLASHGEN, "generate", "--backend", "cpu", "--prompt-ids", ",".join(map(str, prompt["ids"])),
                        "--max-new-tokens", str(len(want)), "--json"], capture_output=True, text=True, timeout=120,
                       cwd="/")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["output_ids"] == want


def test_tokenize_and_template_commands_read_the_gguf(reference, tmp_path):
    entry = next(c for c in reference["tokenizer_corpus"] if c["text"] == "a 1 22 333 4444 55555")
    r = subprocess.run([FLASHGEN, "tokenize", "--model", MODEL, "--text", entry["text"], "--json"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ids"] == entry["ids"]
    chat = reference["chats"][1]
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(chat["messages"]), encoding="utf-8")
    r = subprocess.run([FLASHGEN, "template", "--model", MODEL, "--messages", str(messages), "--add-generation-prompt"],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode("utf-8") == chat["prompt_text"]
