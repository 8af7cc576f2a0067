"""huggingface_hub's InferenceClient text-generation calls (TGI protocol) against `flashgen serve`."""
import pytest
from huggingface_hub import InferenceClient
from huggingface_hub.errors import TextGenerationError
from huggingface_hub.inference._generated.types import TextGenerationOutput


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
    assert len(d.prefill) >= 1
    assert all(t.logprob <= 0 for t in d.tokens)


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


def test_text_generation_validation_error(client):
    with pytest.raises(TextGenerationError) as e:
        client.text_generation("Hello", max_new_tokens=5, temperature=-1.0)
    assert "temperature" in str(e.value)
