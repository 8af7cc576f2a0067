"""huggingface_hub's InferenceClient against `flashgen serve`: text generation (TGI protocol) and
chat completion with base_url (OpenAI protocol, which the client sends with a placeholder model
name), streaming and not."""
import pytest
from huggingface_hub import InferenceClient
from huggingface_hub.errors import HfHubHTTPError, TextGenerationError
from huggingface_hub.inference._generated.types import TextGenerationOutput

from conftest import MODEL_NAME, Server


@pytest.fixture(scope="module")
def client(server):
    return InferenceClient(model=server.url, timeout=60)


def test_text_generation_plain(client):
    text = client.text_generation("Hello", max_new_tokens=6)
    assert isinstance(text, str)
    again = client.text_generation("Hello", max_new_tokens=6)
    assert text == again  # greedy by default (do_sample false)


def test_text_generation_details(client):
    out = client.text_generation("Hello", max_new_tokens=5, details=True, decoder_input_details=True,
                                 top_n_tokens=2)
    assert isinstance(out, TextGenerationOutput)
    d = out.details
    assert d.finish_reason in ("length", "eos_token")
    assert d.generated_tokens == len(d.tokens)
    assert 1 <= d.generated_tokens <= 5
    assert len(d.prefill) >= 2
    assert all(t.logprob <= 0 for t in d.tokens)
    # decoder_input_details: every prompt token but the first has its logprob.
    assert d.prefill[0].logprob is None
    assert all(t.logprob is not None and t.logprob <= 0 for t in d.prefill[1:])


def test_text_generation_stream_matches_plain(client):
    plain = client.text_generation("The sky", max_new_tokens=8)
    pieces = list(client.text_generation("The sky", max_new_tokens=8, stream=True))
    assert "".join(pieces) == plain
    events = list(client.text_generation("The sky", max_new_tokens=8, stream=True, details=True))
    assert events[-1].generated_text == plain
    assert events[-1].details.finish_reason in ("length", "eos_token")
    assert events[-1].details.generated_tokens == len(events)


def test_text_generation_sampling_seed(client):
    a = client.text_generation("Seeded", max_new_tokens=8, do_sample=True, temperature=0.9, seed=5)
    b = client.text_generation("Seeded", max_new_tokens=8, do_sample=True, temperature=0.9, seed=5)
    assert a == b


def test_text_generation_best_of(client):
    # Candidate i samples with seed + i; the one with the highest total token logprob comes back,
    # the others in details.best_of_sequences.
    kw = dict(max_new_tokens=6, do_sample=True, temperature=1.0, details=True)
    alone = [client.text_generation("Once upon a time", seed=21 + i, **kw) for i in range(3)]
    sums = [sum(t.logprob for t in o.details.tokens) for o in alone]
    best = max(range(3), key=lambda i: (sums[i], -i))
    out = client.text_generation("Once upon a time", seed=21, best_of=3, **kw)
    assert out.generated_text == alone[best].generated_text
    assert out.details.seed == 21 + best
    assert [t.id for t in out.details.tokens] == [t.id for t in alone[best].details.tokens]
    others = [i for i in range(3) if i != best]
    assert [s.generated_text for s in out.details.best_of_sequences] == [alone[i].generated_text for i in others]
    assert [s.seed for s in out.details.best_of_sequences] == [21 + i for i in others]
    assert alone[0].details.best_of_sequences is None
    with pytest.raises(TextGenerationError) as e:
        client.text_generation("Hello", max_new_tokens=2, best_of=2)  # greedy candidates would be equal
    assert "best_of" in str(e.value)


def test_text_generation_validation_error(client):
    with pytest.raises(TextGenerationError) as e:
        client.text_generation("Hello", max_new_tokens=5, temperature=-1.0)
    assert "temperature" in str(e.value)


CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def chat_client(server):
    return InferenceClient(base_url=server.url, timeout=60)


def test_chat_completion(chat_client):
    out = chat_client.chat_completion(messages=CHAT, max_tokens=6, temperature=0)
    msg = out.choices[0].message
    assert msg.role == "assistant"
    assert isinstance(msg.content, str)
    assert out.choices[0].finish_reason in ("stop", "length")
    assert 1 <= out.usage.completion_tokens <= 6
    assert out.model == MODEL_NAME


def test_chat_completion_stream_matches_plain(chat_client):
    plain = chat_client.chat_completion(messages=CHAT, max_tokens=10, temperature=0,
                                        extra_body={"ignore_eos": True})
    chunks = list(chat_client.chat_completion(messages=CHAT, max_tokens=10, temperature=0, stream=True,
                                              extra_body={"ignore_eos": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"]
    assert plain.usage.completion_tokens == 10


def test_chat_completion_strict_model_name_is_404(tokenizer_dir):
    s = Server(tokenizer_dir, ["--strict-model-name"])
    try:
        with pytest.raises(HfHubHTTPError) as e:
            InferenceClient(base_url=s.url, timeout=60).chat_completion(messages=CHAT, max_tokens=2)
        assert e.value.response.status_code == 404
        out = InferenceClient(base_url=s.url, timeout=60).chat_completion(messages=CHAT, model=MODEL_NAME,
                                                                          max_tokens=2)
        assert out.model == MODEL_NAME
    finally:
        s.kill()
