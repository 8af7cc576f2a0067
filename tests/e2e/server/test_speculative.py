"""`flashgen serve --speculative ngram|draft`: replies equal those of a server that does not
speculate (greedy), streamed and not, through the OpenAI SDK; usage counts the tokens emitted;
/metrics reports drafted and accepted tokens, by draft position; a request can opt out; no page
stays held. Predicted outputs (`prediction`) on a plain server: the same replies, usage's
prediction counts, and malformed predictions refused by name (their acceptance on real text is in
test_real_model.py)."""
import os

import openai
import requests

from conftest import MODEL_DIR, MODEL_NAME, Server

PROMPTS = ["the the the the", "abc abc abc abc abc", "hello world, hello world, hello", "1 2 3 1 2 3 1 2"]


def completions(server, stream=False, extra=None):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    out = []
    for p in PROMPTS:
        kwargs = dict(model=MODEL_NAME, prompt=p, max_tokens=40, temperature=0,
                      extra_body={"ignore_eos": True, **(extra or {})})
        if stream:
            text = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kwargs))
            out.append((text, None))
        else:
            r = client.completions.create(**kwargs)
            out.append((r.choices[0].text, r.usage.completion_tokens))
    return out


def test_speculative_replies_equal_plain_ones(tokenizer_dir):
    plain = Server(tokenizer_dir)
    try:
        want = completions(plain)
        want_stream = completions(plain, stream=True)
    finally:
        plain.kill()
    assert [t for t, _ in want] == [t for t, _ in want_stream]
    for method, extra in (("ngram", ["--ngram-min", "1"]), ("draft", ["--draft-model", MODEL_DIR])):
        s = Server(tokenizer_dir, ["--speculative", method, "--num-speculative-tokens", "3", *extra])
        try:
            got = completions(s)
            assert got == want, method  # the same texts and the same completion_tokens
            got_stream = completions(s, stream=True)
            assert [t for t, _ in got_stream] == [t for t, _ in want], method
            m = s.wait_idle()
            assert m["flashgen_kv_pages_used"] == 0
            assert m["flashgen_spec_draft_tokens_total"] > 0, method
            assert 0 < m["flashgen_spec_accepted_tokens_total"] <= m["flashgen_spec_draft_tokens_total"]
            first = m['flashgen_spec_drafted_by_position_total{position="1"}']
            assert first > 0
            assert m['flashgen_spec_accepted_by_position_total{position="1"}'] <= first
            if method == "draft":  # the draft is the served model itself: every draft is accepted
                assert m["flashgen_spec_accepted_tokens_total"] == m["flashgen_spec_draft_tokens_total"]
            # Opting out: nothing more is drafted.
            before = m["flashgen_spec_draft_tokens_total"]
            assert completions(s, extra={"speculative": False}) == want
            assert s.wait_idle()["flashgen_spec_draft_tokens_total"] == before
        finally:
            s.kill()


def test_bad_speculative_flags_are_refused(tokenizer_dir):
    import subprocess
    from conftest import FLASHGEN
    for args, msg in ((["--speculative", "draft"], "--draft-model"),
                      (["--speculative", "ngram", "--num-speculative-tokens", "0"], "--num-speculative-tokens"),
                      (["--num-speculative-tokens", "17"], "--num-speculative-tokens"),  # predictions use it too
                      (["--draft-model", MODEL_DIR], "--speculative draft")):
        r = subprocess.run([FLASHGEN, "serve", "--model", MODEL_DIR, "--tokenizer", tokenizer_dir, "--backend", "cpu",
                            "--port", "0", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0
        assert msg in (r.stdout + r.stderr), r.stdout + r.stderr


def test_predictions_on_a_plain_server(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    kwargs = dict(model=MODEL_NAME, messages=[{"role": "user", "content": "Tell me a story"}], max_tokens=32,
                  temperature=0, extra_body={"ignore_eos": True})
    plain = client.chat.completions.create(**kwargs)
    text = plain.choices[0].message.content
    assert plain.usage.completion_tokens_details is None  # no prediction: no prediction counts
    for stream in (False, True):
        r = client.chat.completions.create(prediction={"type": "content", "content": [{"type": "text", "text": text}]},
                                           stream=stream, stream_options={"include_usage": True} if stream else None,
                                           **kwargs)
        if stream:
            chunks = list(r)
            got = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            usage = chunks[-1].usage
        else:
            got, usage = r.choices[0].message.content, r.usage
        assert got == text
        assert usage.completion_tokens == plain.usage.completion_tokens
        d = usage.completion_tokens_details
        assert d.accepted_prediction_tokens > 0 and d.rejected_prediction_tokens >= 0
    # Opted out of speculation: the prediction is not used.
    r = client.chat.completions.create(prediction={"type": "content", "content": text},
                                       **{**kwargs, "extra_body": {"ignore_eos": True, "speculative": False}})
    assert r.choices[0].message.content == text
    assert (r.usage.completion_tokens_details.accepted_prediction_tokens,
            r.usage.completion_tokens_details.rejected_prediction_tokens) == (0, 0)
    assert server.wait_idle()["flashgen_kv_pages_used"] == 0
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "x"}]}
    for prediction, param in (({"type": "text", "content": "a"}, "prediction.type"),
                              ({"type": "content"}, "prediction.content"),
                              ({"type": "content", "content": 5}, "prediction.content"),
                              ({"type": "content", "content": [{"type": "image_url"}]}, "prediction.content"),
                              ("abc", "prediction"),
                              ({"type": "content", "content": "a" * 5000}, "prediction")):
        r = requests.post(server.url + "/v1/chat/completions", json={**body, "prediction": prediction}, timeout=30)
        assert r.status_code == 400, (prediction, r.text)
        assert r.json()["error"]["param"] == param, r.text
