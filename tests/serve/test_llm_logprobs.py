"""`logprobs` through the `openai` client: each generated token's log-probability and its most likely
alternatives equal Paddle's log_softmax of the model's logits (the same weights, in this process) within
1e-4, before temperature and sampling filters; completions' legacy layout, chat's `content` list, streams,
and the field rules."""

import concurrent.futures

import numpy as np
import openai
import paddle
import pytest
from generation.test_generator_artifact import _tokenizer
from jinja2 import Template
from openai import OpenAI

from .checkpoint_server import BOS, PROMPT, TEMPLATE

MODEL = "tiny-llama"
TOL = 1e-4


@pytest.fixture(scope="module")
def client(checkpoint_server):
    return OpenAI(base_url=f"http://{checkpoint_server.url}/v1", api_key="unused", max_retries=0, timeout=60)


def _paddle_logprobs(net, ids: list[int]) -> np.ndarray:
    """log_softmax of the Paddle model's logits at every position of `ids` [T, V] (float64 for the compare)."""
    with paddle.no_grad():
        out = net(paddle.to_tensor([ids]))
    logits = out.logits if hasattr(out, "logits") else out[0]
    return paddle.nn.functional.log_softmax(logits.astype("float32"), axis=-1).numpy()[0].astype(np.float64)


def _check_token(want_row: np.ndarray, token: int, logprob: float, top: list[tuple[int, float]], n: int):
    """One token's logprob and its n alternatives against Paddle's log-probabilities of that step."""
    assert abs(logprob - want_row[token]) < TOL
    order = np.argsort(-want_row, kind="stable")[:n]
    assert len(top) == n
    for (got_id, got_value), want_id in zip(top, order):
        assert abs(got_value - want_row[want_id]) < TOL
        # NOTE: an id may differ only where Paddle's two values tie within rounding
        assert got_id == want_id or abs(want_row[got_id] - want_row[want_id]) < TOL


def _id(text: str) -> int:
    return int(text[1:])  # NOTE: the toy tokenizer's token w17 is id 17


def test_completion_logprobs_are_paddles_log_softmax(client, checkpoint):
    net = checkpoint[1]
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, logprobs=3)
    choice = r.choices[0]
    ids = choice.model_extra["token_ids"]
    lp = choice.logprobs
    assert lp.tokens == [f"w{t}" for t in ids] and len(lp.token_logprobs) == len(ids)
    want = _paddle_logprobs(net, PROMPT + ids)
    for j, token in enumerate(ids):
        row = want[len(PROMPT) - 1 + j]
        top = sorted(lp.top_logprobs[j].items(), key=lambda kv: -kv[1])
        # NOTE: the three most likely and the chosen one (greedy: the chosen is the most likely)
        _check_token(row, token, lp.token_logprobs[j], [(_id(k), v) for k, v in top], 3)
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:j]) for j in range(len(ids))]


def test_chat_logprobs_are_taken_before_temperature_and_filters(client, checkpoint):
    net = checkpoint[1]
    messages = [{"role": "user", "content": "w5 w9"}]
    kw = dict(model=MODEL, messages=messages, max_tokens=5, temperature=1.7, seed=11, extra_body={"top_k": 4})
    r = client.chat.completions.create(**kw, logprobs=True, top_logprobs=5)
    choice = r.choices[0]
    ids = choice.model_extra["token_ids"]
    plain = client.chat.completions.create(**kw)  # NOTE: asking for logprobs changes no token
    assert plain.choices[0].model_extra["token_ids"] == ids and plain.choices[0].logprobs is None
    prompt = _chat_prompt(messages)
    want = _paddle_logprobs(net, prompt + ids)
    content = choice.logprobs.content
    assert [c.token for c in content] == [f"w{t}" for t in ids]
    for j, (c, token) in enumerate(zip(content, ids)):
        assert c.bytes == list(c.token.encode())
        top = [(_id(t.token), t.logprob) for t in c.top_logprobs]
        _check_token(want[len(prompt) - 1 + j], token, c.logprob, top, 5)


def _chat_prompt(messages) -> list[int]:
    """The chat prompt's ids as the server renders them: the folder's template with its BOS token."""
    text = Template(TEMPLATE).render(messages=messages, add_generation_prompt=True, bos_token="w3")
    return _tokenizer().encode(text).ids


def test_a_stream_carries_each_tokens_logprobs_and_logprobs_0_is_honoured(client):
    kw = dict(model=MODEL, prompt=PROMPT, max_tokens=7)
    whole = client.completions.create(**kw, logprobs=0).choices[0]
    assert whole.logprobs is not None and all(len(d) == 1 for d in whole.logprobs.top_logprobs)
    tokens, values, offsets = [], [], []
    for chunk in client.completions.create(**kw, logprobs=0, stream=True):
        lp = chunk.choices[0].logprobs
        tokens += lp.tokens
        values += lp.token_logprobs
        offsets += lp.text_offset
    assert tokens == whole.logprobs.tokens and offsets == whole.logprobs.text_offset
    np.testing.assert_array_equal(values, whole.logprobs.token_logprobs)
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "w7"}], max_tokens=4, logprobs=True, stream=True
    )
    content = [
        c for chunk in chat if chunk.choices and chunk.choices[0].logprobs for c in chunk.choices[0].logprobs.content
    ]
    assert len(content) == 4 and all(c.top_logprobs == [] for c in content)


def test_logprobs_do_not_depend_on_company(client):
    """A request's logprobs alone equal its logprobs beside requests that ask for none."""
    kw = dict(model=MODEL, prompt=PROMPT, max_tokens=8, logprobs=2)
    alone = client.completions.create(**kw).choices[0].logprobs

    def other(i):
        return client.completions.create(model=MODEL, prompt=[7 + i, 9, 11], max_tokens=12, temperature=0.9, seed=i)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        others = [pool.submit(other, i) for i in range(3)]
        together = pool.submit(client.completions.create, **kw).result().choices[0].logprobs
        [f.result() for f in others]
    assert together.tokens == alone.tokens
    np.testing.assert_array_equal(together.token_logprobs, alone.token_logprobs)
    assert together.top_logprobs == alone.top_logprobs


def test_an_evaluation_harness_gets_its_prompts_scores_with_max_tokens_0(client, checkpoint):
    """lm-evaluation-harness's loglikelihood request: echo, logprobs and max_tokens 0."""
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=0, echo=True, logprobs=1, temperature=0)
    choice = r.choices[0]
    lp = choice.logprobs
    assert choice.text == " ".join(f"w{t}" for t in PROMPT) and choice.finish_reason == "length"
    assert lp.tokens == [f"w{t}" for t in PROMPT] and r.usage.completion_tokens == 0
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    want = _paddle_logprobs(checkpoint[1], PROMPT)
    for t in range(1, len(PROMPT)):
        top = sorted(lp.top_logprobs[t].items(), key=lambda kv: -kv[1])[:1]
        _check_token(want[t - 1], PROMPT[t], lp.token_logprobs[t], [(_id(k), v) for k, v in top], 1)


def test_echo_puts_the_prompt_first_in_the_text_and_the_logprobs(client):
    kw = dict(model=MODEL, prompt="w5 w9 w14 w20", max_tokens=5, temperature=0)
    plain = client.completions.create(**kw, logprobs=2).choices[0]
    echoed = client.completions.create(**kw, logprobs=2, echo=True).choices[0]
    assert echoed.text == "w5 w9 w14 w20" + plain.text
    # NOTE: the text prompt's tokens begin with the tokenizer's BOS, w3
    assert echoed.logprobs.tokens == [f"w{t}" for t in [BOS] + PROMPT] + plain.logprobs.tokens
    assert echoed.logprobs.token_logprobs[0] is None
    np.testing.assert_array_equal(echoed.logprobs.token_logprobs[len(PROMPT) + 1 :], plain.logprobs.token_logprobs)
    assert echoed.model_extra["token_ids"] == plain.model_extra["token_ids"]
    text_only = client.completions.create(**kw, echo=True).choices[0]
    assert text_only.text == echoed.text and text_only.logprobs is None
    streamed = "".join(c.choices[0].text for c in client.completions.create(**kw, echo=True, stream=True))
    assert streamed == echoed.text
    # NOTE: best_of ranks by logprobs it asks the engine for; the echo still has none
    best = client.completions.create(**kw, echo=True, n=1, best_of=2).choices[0]
    assert best.text == echoed.text and best.logprobs is None


@pytest.mark.parametrize(
    "kind, extra, param",
    [
        ("completion", {"logprobs": 6}, "logprobs"),
        ("completion", {"logprobs": True}, "logprobs"),
        ("completion", {"logprobs": -1}, "logprobs"),
        ("chat", {"logprobs": 1}, "logprobs"),
        ("chat", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("chat", {"top_logprobs": 2}, "top_logprobs"),
        ("completion", {"echo": 1}, "echo"),
        ("completion", {"max_tokens": 0}, "max_tokens"),
        ("completion", {"n": 3, "best_of": 2}, "best_of"),
        ("completion", {"best_of": 21}, "best_of"),
        ("completion", {"n": 2, "best_of": 3, "stream": True}, "best_of"),
        ("completion", {"n": 0}, "n"),
    ],
)
def test_logprobs_past_the_limits_get_400_then_a_good_request_is_served(client, kind, extra, param):
    with pytest.raises(openai.BadRequestError) as bad:
        if kind == "completion":
            client.completions.create(model=MODEL, prompt=PROMPT, **{"max_tokens": 2, **extra})
        else:
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "w5"}], max_tokens=2, extra_body=extra
            )
    assert bad.value.body["param"] == param and bad.value.body["type"] == "invalid_request_error"
    good = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, logprobs=1)
    assert len(good.choices[0].logprobs.token_logprobs) == 2


def test_n_choices_each_their_own_seeded_row_and_usage_counts_them_all(client):
    kw = dict(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=1.2, seed=40)
    r = client.completions.create(**kw, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]
    # NOTE: choice i draws from seed + i, so each is the single-choice request with that seed
    for i, c in enumerate(r.choices):
        alone = client.completions.create(**{**kw, "seed": 40 + i}).choices[0]
        assert c.model_extra["token_ids"] == alone.model_extra["token_ids"] and c.text == alone.text
    assert len({tuple(c.model_extra["token_ids"]) for c in r.choices}) > 1
    assert r.usage.prompt_tokens == len(PROMPT)
    assert r.usage.completion_tokens == sum(len(c.model_extra["token_ids"]) for c in r.choices)
    chunks = list(client.completions.create(**kw, n=3, stream=True, stream_options={"include_usage": True}))
    for i, c in enumerate(r.choices):
        assert "".join(ch.choices[0].text for ch in chunks if ch.choices and ch.choices[0].index == i) == c.text
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "w5"}], max_tokens=3, n=2, temperature=0
    )
    assert [c.index for c in chat.choices] == [0, 1] and chat.choices[0].message == chat.choices[1].message


def test_best_of_returns_the_n_choices_of_highest_mean_logprob(client):
    kw = dict(model=MODEL, prompt=PROMPT, max_tokens=5, temperature=1.5, seed=7)
    made = [client.completions.create(**{**kw, "seed": 7 + i}, logprobs=0).choices[0] for i in range(4)]
    means = [np.mean(c.logprobs.token_logprobs) for c in made]
    best = client.completions.create(**kw, n=2, best_of=4)
    want = [made[i] for i in np.argsort(means, kind="stable")[::-1][:2]]
    assert [c.model_extra["token_ids"] for c in best.choices] == [c.model_extra["token_ids"] for c in want]
    assert [c.index for c in best.choices] == [0, 1] and best.choices[0].logprobs is None
    assert best.usage.completion_tokens == sum(len(c.model_extra["token_ids"]) for c in made)
