"""The official OpenAI Python SDK against `flashgen serve` (chat and completions, streaming and
not, usage, stop, seed reproducibility, logprobs, n, and the error cases)."""
import openai
import pytest
import requests

from conftest import MODEL_NAME, Server


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_models_list(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]


def test_completion_non_streaming_with_usage(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Hello there", max_tokens=8, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.object == "text_completion"
    assert len(r.choices) == 1
    assert r.choices[0].finish_reason == "length"
    assert isinstance(r.choices[0].text, str) and r.choices[0].text
    assert r.usage.completion_tokens == 8
    assert r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + 8
    assert r.usage.prompt_tokens_details.cached_tokens >= 0


def test_completion_greedy_is_deterministic_and_streaming_matches(client):
    kw = dict(model=MODEL_NAME, prompt="The quick brown fox", max_tokens=12, temperature=0,
              extra_body={"ignore_eos": True})
    a = client.completions.create(**kw)
    b = client.completions.create(**kw)
    assert a.choices[0].text == b.choices[0].text
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == a.choices[0].text
    assert chunks[-1].usage.completion_tokens == 12
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_chat_non_streaming(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=[
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say something."}], max_tokens=6, temperature=0)
    assert r.object == "chat.completion"
    msg = r.choices[0].message
    assert msg.role == "assistant"
    assert isinstance(msg.content, str)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert 1 <= r.usage.completion_tokens <= 6


def test_chat_streaming_with_usage(client):
    stream = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                            max_completion_tokens=10, temperature=0, stream=True,
                                            stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 10
    full = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                          max_completion_tokens=10, temperature=0, extra_body={"ignore_eos": True})
    assert content == full.choices[0].message.content


def test_seed_reproducibility(client):
    kw = dict(model=MODEL_NAME, prompt="Once upon a time", max_tokens=16, temperature=1.0, top_p=0.95, seed=1234,
              extra_body={"ignore_eos": True})
    a = client.completions.create(**kw).choices[0].text
    b = client.completions.create(**kw).choices[0].text
    assert a == b
    others = {client.completions.create(**dict(kw, seed=s)).choices[0].text for s in (1, 2, 3)}
    assert len(others | {a}) > 1  # different seeds give different samples


def test_stop_string_cuts_output(client):
    base = client.completions.create(model=MODEL_NAME, prompt="abc", max_tokens=20, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text
    assert len(base) >= 4
    stop = base[2:4]
    r = client.completions.create(model=MODEL_NAME, prompt="abc", max_tokens=20, temperature=0, stop=[stop],
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == base[:base.index(stop)]
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL_NAME, prompt="abc", max_tokens=20, temperature=0, stop=stop, stream=True,
        extra_body={"ignore_eos": True}) if c.choices)
    assert streamed == r.choices[0].text


def test_n_choices_and_logprobs(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "x"}], n=3,
                                       max_tokens=4, temperature=1.0, seed=7, logprobs=True, top_logprobs=2,
                                       extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1, 2]
    for c in r.choices:
        assert len(c.logprobs.content) == 4
        for t in c.logprobs.content:
            assert t.logprob <= 0
            assert len(t.top_logprobs) == 2
    assert r.usage.completion_tokens == 12
    cr = client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=3, temperature=0, logprobs=2,
                                   extra_body={"ignore_eos": True})
    lp = cr.choices[0].logprobs
    assert len(lp.tokens) == 3 and len(lp.token_logprobs) == 3 and len(lp.top_logprobs[0]) <= 2


def test_penalties_accepted(client):
    r = client.completions.create(model=MODEL_NAME, prompt="aaaa", max_tokens=5, temperature=0,
                                  presence_penalty=1.5, frequency_penalty=0.5, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 5


def test_min_tokens_holds_back_stop_ids_and_strings(client, server):
    # A token forced by logit_bias and named a stop id ends the reply at once, unless min_tokens
    # tokens must come first: then it is masked out of them and ends the reply right after.
    token = requests.post(server.url + "/tokenize", json={"prompt": " zebra"}, timeout=10).json()["tokens"][-1]
    kw = dict(model=MODEL_NAME, prompt="The quick brown fox", max_tokens=12, temperature=0,
              logit_bias={str(token): 100})
    at_once = client.completions.create(extra_body={"stop_token_ids": [token]}, **kw)
    assert at_once.usage.completion_tokens == 1 and at_once.choices[0].finish_reason == "stop"
    held = client.completions.create(extra_body={"stop_token_ids": [token], "min_tokens": 5}, **kw)
    assert held.usage.completion_tokens == 6 and held.choices[0].finish_reason == "stop"
    # Stop strings are looked for only after the first min_tokens tokens, streamed or not.
    base = client.completions.create(model=MODEL_NAME, prompt="abc", max_tokens=20, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text
    stop = base[2:4]
    r = client.completions.create(model=MODEL_NAME, prompt="abc", max_tokens=20, temperature=0, stop=[stop],
                                  extra_body={"ignore_eos": True, "min_tokens": 20})
    assert r.choices[0].text == base and r.choices[0].finish_reason == "length"
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL_NAME, prompt="abc", max_tokens=20, temperature=0, stop=stop, stream=True,
        extra_body={"ignore_eos": True, "min_tokens": 20}) if c.choices)
    assert streamed == base
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="abc", max_tokens=4, extra_body={"min_tokens": 5})
    assert e.value.body["param"] == "min_tokens"


def test_logit_bias(client, server):
    # +100 forces a token whatever the model prefers; the text is that token's, repeated.
    token = requests.post(server.url + "/tokenize", json={"prompt": " zebra"}, timeout=10).json()["tokens"][-1]
    forced = requests.post(server.url + "/detokenize", json={"tokens": [token] * 6}, timeout=10).json()["prompt"]
    kw = dict(model=MODEL_NAME, prompt="The quick brown fox", max_tokens=6, extra_body={"ignore_eos": True})
    plain = client.completions.create(temperature=0, **kw).choices[0].text
    assert plain != forced
    assert client.completions.create(temperature=0, logit_bias={str(token): 100}, **kw).choices[0].text == forced
    assert client.completions.create(temperature=1, seed=3, logit_bias={str(token): 100}, **kw).choices[0].text == forced
    chat = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hi"}],
                                          max_tokens=6, temperature=0, logit_bias={str(token): 100},
                                          extra_body={"ignore_eos": True})
    assert chat.choices[0].message.content == forced
    # Small biases are accepted and change nothing they should not: a bias of 0 is no bias.
    assert client.completions.create(temperature=0, logit_bias={str(token): 0}, **kw).choices[0].text == plain
    vocab = requests.get(server.url + "/info", timeout=10).json()["vocab_size"]
    for bad in ({"abc": 1}, {"-1": 1}, {"01": 1}, {str(vocab): 1}, {"5": 100.5}, {"5": "high"}):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(logit_bias=bad, **kw)
        assert e.value.body["param"] == "logit_bias", bad


def test_echo_with_logprobs_scores_the_prompt(client, server):
    # The scoring call of evaluation harnesses: echo + logprobs + max_tokens 0 gives a logprob for
    # every prompt token but the first. A prompt that continues with the greedy output scores
    # those tokens as generation did, and the prompt's own as TGI's decoder_input_details do.
    gen = requests.post(server.url + "/generate", timeout=60, json={
        "inputs": "The quick brown fox", "parameters": {"max_new_tokens": 4, "details": True,
                                                        "decoder_input_details": True}}).json()["details"]
    prompt = [t["id"] for t in gen["prefill"]]
    full = prompt + [t["id"] for t in gen["tokens"]]
    assert len(gen["tokens"]) == 4
    scored = client.completions.create(model=MODEL_NAME, prompt=full, max_tokens=0, echo=True, logprobs=1)
    c = scored.choices[0]
    assert c.finish_reason == "length" and scored.usage.completion_tokens == 0
    lp = c.logprobs
    assert len(lp.tokens) == len(full) and len(lp.token_logprobs) == len(full)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x <= 0 for x in lp.token_logprobs[1:])
    assert all(len(t) == 1 for t in lp.top_logprobs[1:])
    # The greedy tokens were each the most likely one: their top entry is themselves.
    for tok, top in zip(lp.tokens[-4:], lp.top_logprobs[-4:]):
        assert list(top) == [tok]
    assert lp.token_logprobs[-4:] == pytest.approx([t["logprob"] for t in gen["tokens"]], abs=2e-3)
    assert lp.token_logprobs[1:len(prompt)] == pytest.approx([t["logprob"] for t in gen["prefill"][1:]], abs=1e-5)
    # Streamed: the first chunk carries the echoed prompt and its logprobs.
    chunks = list(client.completions.create(model=MODEL_NAME, prompt=full, max_tokens=2, echo=True, logprobs=0,
                                            stream=True, extra_body={"ignore_eos": True}))
    streamed = [x for ch in chunks if ch.choices and ch.choices[0].logprobs for x in ch.choices[0].logprobs.token_logprobs]
    assert len(streamed) == len(full) + 2 and streamed[0] is None
    assert streamed[1:len(full)] == pytest.approx(lp.token_logprobs[1:], abs=1e-5)
    # A one-token prompt has nothing to score but is still listed.
    one = client.completions.create(model=MODEL_NAME, prompt=full[:1], max_tokens=0, echo=True, logprobs=0)
    assert one.choices[0].logprobs.token_logprobs == [None] and len(one.choices[0].logprobs.tokens) == 1


def test_best_of_returns_the_candidates_with_the_highest_mean_logprob(client):
    kw = dict(model=MODEL_NAME, prompt="Once upon a time", max_tokens=6, temperature=1.0, seed=11)
    # best_of == n returns every candidate (seeds seed + i), with their logprobs.
    every = client.completions.create(n=4, logprobs=0, **kw)
    means = [sum(c.logprobs.token_logprobs) / len(c.logprobs.token_logprobs) for c in every.choices]
    ranked = sorted(range(4), key=lambda i: -means[i])
    best = client.completions.create(n=2, best_of=4, **kw)
    assert [c.index for c in best.choices] == [0, 1]
    assert [c.text for c in best.choices] == [every.choices[i].text for i in ranked[:2]]
    assert best.choices[0].logprobs is None  # not asked for
    assert best.usage.completion_tokens == every.usage.completion_tokens  # every candidate counts
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(n=2, best_of=1, **kw)
    assert e.value.body["param"] == "best_of"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(n=1, best_of=3, stream=True, **kw)
    assert e.value.body["param"] == "best_of"


def test_any_model_name_is_served_unless_strict(client, tokenizer_dir):
    # One model served: any name works, as with text-generation-inference; replies name the model.
    r = client.completions.create(model="no-such-model", prompt="x", max_tokens=2)
    assert r.model == MODEL_NAME and r.usage.completion_tokens >= 1
    # conftest's Server already names the model; a repeated name is not listed twice.
    strict = Server(tokenizer_dir, ["--served-model-name", MODEL_NAME, "alias-b", "--strict-model-name"])
    try:
        sc = openai.OpenAI(base_url=strict.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        with pytest.raises(openai.NotFoundError) as e:
            sc.completions.create(model="no-such-model", prompt="x", max_tokens=2)
        assert e.value.status_code == 404 and e.value.body["code"] == "model_not_found"
        assert sc.completions.create(model="alias-b", prompt="x", max_tokens=2).model == "alias-b"
        assert [m.id for m in sc.models.list().data] == [MODEL_NAME, "alias-b"]
    finally:
        strict.kill()


def test_errors(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=-5)
    assert e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "x"}], temperature=7)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=100000)
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="x", extra_body={"frobnicate": True})
    assert e.value.body["param"] == "frobnicate"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL_NAME, prompt="word " * 400, max_tokens=4)
