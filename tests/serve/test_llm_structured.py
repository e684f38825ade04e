"""Structured output through the `openai` client: `response_format` (json_object, json_schema) and vLLM's
guided_regex / guided_choice / guided_json constrain each token with llguidance's mask, on a tiny Llama with
random weights and a character-level byte-level tokenizer (so that it can spell any ASCII text). The text
validates against its schema (jsonschema), a greedy choice is the one the model itself scores highest (its
prompt scores, echo + logprobs), an unconstrained neighbour keeps the tokens it gets alone, and a schema that
does not compile gets a 400 naming its field, followed by a good request."""

import json
import re

import jsonschema
import numpy as np
import openai
import pytest
from openai import OpenAI

from .chars_server import MODEL

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "admin": {"type": "boolean"},
        "team": {"enum": ["red", "blue"]},
    },
    "required": ["name", "age", "admin", "team"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def client(chars_server):
    return OpenAI(base_url=f"http://{chars_server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def _schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_a_json_schema_answer_validates(client, temperature):
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Who is it?"}],
        response_format=_schema_format(PERSON),
        temperature=temperature,
        seed=3,
        n=2,
        max_tokens=80,
    )
    for choice in r.choices:
        assert choice.finish_reason == "stop", choice.message.content
        jsonschema.validate(json.loads(choice.message.content), PERSON)
    assert r.usage.completion_tokens == sum(len(c.message.content) + 1 for c in r.choices)  # NOTE: + the EOS


def test_json_object_regex_and_choice_on_completions(client):
    def complete(**extra):
        r = client.completions.create(model=MODEL, prompt="x=", max_tokens=60, temperature=0, extra_body=extra)
        return r.choices[0]

    # NOTE: any object: random weights may open a string they never close, so 4 seeded choices, each ended by
    # its grammar ("stop") an object, and at least one so (a seeded request's choices are the same every run)
    r = client.completions.create(
        model=MODEL, prompt="x=", max_tokens=100, n=4, seed=0, extra_body={"response_format": {"type": "json_object"}}
    )
    ended = [c.text for c in r.choices if c.finish_reason == "stop"]
    assert ended and all(isinstance(json.loads(t), dict) for t in ended), [c.text for c in r.choices]
    assert all(c.text.startswith("{") for c in r.choices)
    # NOTE: response_format "text" asks for nothing, so it goes with a guided field
    assert complete(response_format={"type": "text"}, guided_choice=["ab"]).text == "ab"
    got = complete(guided_regex=r"[a-c]{2}-\d{3}")
    assert re.fullmatch(r"[a-c]{2}-\d{3}", got.text) and got.finish_reason == "stop"
    assert complete(guided_choice=["cat", "dog", "emu"]).text in ("cat", "dog", "emu")
    schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 3}
    jsonschema.validate(json.loads(complete(guided_json=schema).text), schema)
    so = complete(structured_outputs={"regex": "[xyz]{1,4}!"})
    assert re.fullmatch("[xyz]{1,4}!", so.text)


def test_a_greedy_choice_is_the_one_the_model_scores_highest(client):
    """guided_choice between single characters: greedy takes the highest of the model's own log-probabilities
    of them after the prompt (the prompt-scoring path, an independent program)."""
    prompt, options = "pick:", ["q", "7", "}", "M"]

    def last_logprob(option):
        r = client.completions.create(model=MODEL, prompt=prompt + option, max_tokens=0, echo=True, logprobs=0)
        return r.choices[0].logprobs.token_logprobs[-1]

    scores = [last_logprob(o) for o in options]
    r = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=5, temperature=0, extra_body={"guided_choice": options}
    )
    assert r.choices[0].text == options[int(np.argmax(scores))]


def test_an_unconstrained_neighbour_keeps_its_tokens(client):
    """A constrained request makes the engine decode a token per round; its neighbours' tokens do not change."""

    def plain():
        r = client.completions.create(model=MODEL, prompt="hello there", max_tokens=40, temperature=0)
        return r.choices[0].model_extra["token_ids"]

    alone = plain()
    streams = [
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": f"person {i}"}],
            response_format=_schema_format(PERSON),
            max_tokens=60,  # NOTE: PERSON takes at most 56 characters; 2 x 6 blocks + the plain one's 4 fit the pool
            stream=True,
        )
        for i in range(2)
    ]
    # NOTE: both are decoding (their first content has come) when the plain request is sent
    texts = [next(c.choices[0].delta.content for c in s if c.choices and c.choices[0].delta.content) for s in streams]
    assert plain() == alone
    for text, stream in zip(texts, streams):
        text += "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        jsonschema.validate(json.loads(text), PERSON)


def test_a_short_max_tokens_ends_with_length(client):
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "q"}], response_format=_schema_format(PERSON), max_tokens=5
    )
    choice = r.choices[0]
    assert choice.finish_reason == "length" and len(choice.message.content) == 5
    assert choice.message.content.startswith('{"')


@pytest.mark.parametrize(
    "extra, param, words",
    [
        ({"response_format": _schema_format({"type": "nope"})}, "response_format", "does not compile"),
        ({"guided_regex": "a(b"}, "guided_regex", "unclosed group"),
        ({"guided_choice": []}, "guided_choice", "non-empty list"),
        ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice", "send one"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}, "response_format", "'name'"),
        ({"response_format": {"type": "yaml"}}, "response_format", "'json_schema'"),
        ({"guided_json": "{not json"}, "guided_json", "not valid JSON"),
        ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "exactly one"),
        ({"structured_outputs": {"regex": "a", "whitespace_pattern": " "}}, "structured_outputs", "whitespace_pattern"),
        ({"guided_regex": "a", "ignore_eos": True}, "ignore_eos", "repeat the EOS"),
    ],
)
def test_a_constraint_that_does_not_compile_is_a_400_then_a_good_request_runs(client, extra, param, words):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="x", max_tokens=4, extra_body=extra)
    error = e.value.body
    assert error["param"] == param and words in error["message"], error
    assert error["type"] == "invalid_request_error"
    ok = client.completions.create(model=MODEL, prompt="x", max_tokens=4, extra_body={"guided_regex": "ok"})
    assert ok.choices[0].text == "ok"
