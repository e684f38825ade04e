"""`paddle-xla serve` with a generator artifact: OpenAI's API through the `openai` package, KServe's generate
extension, continuous batching under load, cancellation, overload and bad input, against the artifact's own
generate for each prompt alone (loaded in this process)."""

import concurrent.futures
import json
import threading
import time

import httpx
import jax
import numpy as np
import openai
import pytest
from generation.test_generator import _model
from generation.test_generator_artifact import WORDS, _tokenizer
from jinja2.sandbox import ImmutableSandboxedEnvironment
from openai import OpenAI

import paddle_xla as px
import paddle_xla.artifact as pxa
from paddle_xla.api.generator import Generator

from .harness import ServeProcess

ROWS, CONTEXT, CHUNK = 8, 64, 4
TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant{% endif %}"
)
FLAGS = ("--max-queue-size", "16", "--max-body-mb", "0.05")
LOAD_CLIENTS, LOAD_REQUESTS, LOAD_BOUND_S = 64, 480, 240


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    """(served folder, the artifact loaded here)."""
    folder = tmp_path_factory.mktemp("llm")
    gen = Generator(_model("llama"), max_batch_size=ROWS, max_length=CONTEXT, chunk=CHUNK, prefill_chunk=16)
    px.export(gen, str(folder / "llm.pxa"), tokenizer=_tokenizer(), chat_template=TEMPLATE)
    return str(folder), pxa.load(str(folder / "llm.pxa"))


@pytest.fixture(scope="module")
def server(llm):
    server = ServeProcess(llm[0], *FLAGS)
    yield server
    server.stop()
    server.no_compiles_after_ready()  # NOTE: after every request of the module that ran here


@pytest.fixture(scope="module")
def client(server):
    return OpenAI(base_url=f"http://{server.url}/v1", api_key="unused", max_retries=0, timeout=60)


class Alone:
    """What the artifact's generate gives each prompt alone (greedy), computed once per prompt."""

    def __init__(self, art):
        self.art, self.eos, self._done = art, set(art.defaults.eos_token_id), {}

    def __call__(self, ids, max_tokens: int) -> list[int]:
        ids = tuple(ids)
        if ids not in self._done:
            room = CONTEXT - len(ids) + 1
            out, _ = self.art.generate(np.array([ids]), max_new_tokens=room)
            self._done[ids] = [int(t) for t in out[0]]
        row = self._done[ids][:max_tokens]
        # NOTE: a greedy run is a prefix of a longer one, up to and including its EOS
        ends = [i for i, t in enumerate(row) if t in self.eos]
        return row[: ends[0] + 1] if ends else row


@pytest.fixture(scope="module")
def alone(llm):
    return Alone(llm[1])


def _words(rng, n):
    return " ".join(WORDS[i] for i in rng.integers(3, len(WORDS), n))


def test_models_lists_and_retrieves_the_generator(client):
    models = client.models.list().data
    assert [m.id for m in models] == ["llm"] and models[0].owned_by == "paddle_xla"
    assert client.models.retrieve("llm") == models[0]
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("nope")
    assert missing.value.code == "model_not_found" and "Unknown model 'nope'" in missing.value.message


def test_a_greedy_completion_is_the_artifacts_generate_alone(client, llm, alone):
    art = llm[1]
    rng = np.random.default_rng(0)
    for n_words, max_tokens in [(3, 8), (1, 1), (20, 30), (40, 20)]:
        prompt = _words(rng, n_words)
        r = client.completions.create(model="llm", prompt=prompt, max_tokens=max_tokens, temperature=0)
        ids = art.encode(prompt)
        want = alone(ids, max_tokens)
        choice = r.choices[0]
        assert choice.model_extra["token_ids"] == want
        assert choice.text == art.decode(want)
        assert choice.finish_reason == ("stop" if want[-1] in alone.eos else "length")
        assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ids), len(want))
    ids = [int(i) for i in rng.integers(3, 128, 9)]  # token ids as the prompt
    r = client.completions.create(model="llm", prompt=ids, max_tokens=6, temperature=0)
    assert r.choices[0].model_extra["token_ids"] == alone(ids, 6)


def test_a_stream_is_the_whole_completion_in_pieces(client):
    kw = dict(model="llm", prompt="w5 w9 w14 w20", max_tokens=12, temperature=0)
    whole = client.completions.create(**kw).choices[0]
    chunks = list(client.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == whole.text and len(texts) >= 12
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.finish_reason
    assert chunks[-1].usage.completion_tokens == len(whole.model_extra["token_ids"])


def test_chat_renders_the_template_in_a_sandbox(client, llm, alone):
    art = llm[1]
    messages = [{"role": "system", "content": "w3 w4"}, {"role": "user", "content": "w7 w8 w9"}]
    prompt = ImmutableSandboxedEnvironment().from_string(TEMPLATE).render(messages=messages, add_generation_prompt=True)
    r = client.chat.completions.create(model="llm", messages=messages, max_tokens=7, temperature=0)
    assert r.choices[0].model_extra["token_ids"] == alone(art.encode(prompt), 7)
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content == art.decode(
        alone(art.encode(prompt), 7)
    )
    pieces = list(
        client.chat.completions.create(model="llm", messages=messages, max_tokens=7, temperature=0, stream=True)
    )
    assert pieces[0].choices[0].delta.role == "assistant"
    assert "".join(p.choices[0].delta.content or "" for p in pieces) == r.choices[0].message.content


def test_a_stop_string_ends_the_completion_where_it_begins(client, llm):
    kw = dict(model="llm", prompt="w5 w9 w14 w20", max_tokens=12, temperature=0)
    free = client.completions.create(**kw).choices[0].text
    stop = free.split()[2]
    for stream in (False, True):
        if stream:
            text = "".join(c.choices[0].text for c in client.completions.create(**kw, stop=[stop], stream=True))
        else:
            r = client.completions.create(**kw, stop=stop).choices[0]
            assert r.finish_reason == "stop"
            text = r.text
        assert text == free[: free.index(stop)]
    # NOTE: one rule, vLLM's: the ids and the usage count the token that completed the stop string, the text
    # leaves the string out unless include_stop_str_in_output
    cut = client.completions.create(**kw, stop=stop)
    kept = client.completions.create(**kw, stop=stop, extra_body={"include_stop_str_in_output": True})
    assert kept.choices[0].text == free[: free.index(stop) + len(stop)]
    ids = cut.choices[0].model_extra["token_ids"]
    assert ids == kept.choices[0].model_extra["token_ids"] and cut.usage.completion_tokens == len(ids)


def test_a_seeded_sample_is_the_same_with_or_without_company(client):
    kw = dict(model="llm", prompt="w11 w12 w13", max_tokens=16, temperature=1.2, top_p=0.9, seed=7)
    mine = client.completions.create(**kw).choices[0].model_extra["token_ids"]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        others = [
            pool.submit(
                client.completions.create, model="llm", prompt=f"w{20 + i} w{30 + i}", max_tokens=20, temperature=0.9
            )
            for i in range(6)
        ]
        again = pool.submit(client.completions.create, **kw)
        [f.result() for f in others]
        assert again.result().choices[0].model_extra["token_ids"] == mine
    fresh = [client.completions.create(**{**kw, "seed": None}).choices[0].model_extra["token_ids"] for _ in range(2)]
    assert fresh[0] != fresh[1]


def test_kserve_generate_and_generate_stream(server, client):
    text = client.completions.create(model="llm", prompt="w5 w6 w7", max_tokens=6, temperature=0).choices[0].text
    with httpx.Client(base_url=f"http://{server.url}", timeout=30) as http:
        r = http.post(
            "/v2/models/llm/generate",
            json={"text_input": "w5 w6 w7", "parameters": {"max_tokens": 6, "temperature": 0}},
        )
        assert r.status_code == 200 and r.json()["text_output"] == text and r.json()["model_name"] == "llm"
        with http.stream(
            "POST", "/v2/models/llm/generate_stream", json={"text_input": "w5 w6 w7", "max_tokens": 6, "temperature": 0}
        ) as s:
            events = [json.loads(line[5:]) for line in s.iter_lines() if line.startswith("data:")]
        assert "".join(e["text_output"] for e in events) == text and events[-1]["finish_reason"] == "length"
        assert http.post("/v2/models/nope/generate", json={"text_input": "w5"}).status_code == 404


def _metric(text: str, name: str) -> float:
    line = [x for x in text.splitlines() if x.startswith(name + '{model="llm"}')]
    return float(line[0].split()[-1])


def test_metrics_count_tokens_times_and_free_cache(server, client):
    with httpx.Client(base_url=f"http://{server.url}", timeout=30) as http:
        before = http.get("/metrics").text
        r = client.completions.create(model="llm", prompt=[5, 6, 7, 8], max_tokens=9, temperature=0)
        made = len(r.choices[0].model_extra["token_ids"])
        _settles(http)
        after = http.get("/metrics").text
    for name, grew in [
        ("paddle_xla_llm_prompt_tokens_total", 4),
        ("paddle_xla_llm_generated_tokens_total", made),
        ("paddle_xla_llm_time_to_first_token_seconds_count", 1),
        ("paddle_xla_llm_prefill_seconds_count", 1),
    ]:
        assert _metric(after, name) - _metric(before, name) == grew, name
    for name in ("paddle_xla_llm_inter_token_seconds_count", "paddle_xla_llm_decode_chunk_seconds_count"):
        assert _metric(after, name) > _metric(before, name), name
    assert _metric(after, "paddle_xla_llm_kv_slots_free") == ROWS * CONTEXT  # idle: the whole cache
    assert "paddle_xla_compiles_after_ready_total 0.0" in after.splitlines()


def test_a_program_compiled_after_ready_is_counted_and_said_once(capsys):
    from prometheus_client import generate_latest

    from paddle_xla.runtime.compile_cache import watch_compiles
    from paddle_xla.serve.metrics import Metrics
    from paddle_xla.serve.server import LateCompiles

    metrics, ready = Metrics(), [False]
    stop = watch_compiles(LateCompiles(metrics, lambda: ready[0]))
    try:
        jax.jit(lambda x: x * 2 + 5)(np.arange(9.0))  # NOTE: warm-up's: not counted
        ready[0] = True
        jax.jit(lambda x: x * 3 + 1)(np.arange(7.0))
        jax.jit(lambda x: x - 2)(np.arange(5.0))
    finally:
        stop()
    jax.jit(lambda x: x / 5)(np.arange(3.0))  # NOTE: after stop: not counted
    text = generate_latest(metrics.registry).decode()
    assert "paddle_xla_compiles_after_ready_total 2.0" in text.splitlines()
    assert capsys.readouterr().out.count("compiled a program after ready") == 1


def _slots(http) -> tuple[float, float]:
    text = http.get("/metrics").text
    busy = [line for line in text.splitlines() if line.startswith('paddle_xla_llm_slots_busy{model="llm"}')]
    waiting = [line for line in text.splitlines() if line.startswith('paddle_xla_llm_waiting{model="llm"}')]
    return float(busy[0].split()[-1]), float(waiting[0].split()[-1])


def _settles(http, bound_s=10.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < bound_s:
        if _slots(http) == (0.0, 0.0):
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"slots still busy after {bound_s} s: {_slots(http)}")


def test_clients_that_leave_free_their_slots(server, client):
    # NOTE: as vLLM tests it: 100 streams whose clients give up after 0.5 s (past the queue limit some get 503),
    # then clients that read three events and close mid-stream; every slot is free again, and a new request
    # is answered within a bound
    url = f"http://{server.url}/v1/completions"
    body = {"model": "llm", "prompt": "w5 w6", "max_tokens": 49, "temperature": 0.7, "stream": True}
    statuses = []

    def impatient(i):
        # NOTE: one outcome per request: its status, or "timeout" when the client gave up before the headers
        # (a stream that started and then stalled past 0.5 s was counted twice before, under load)
        status = "timeout"
        try:
            with httpx.Client(timeout=httpx.Timeout(0.5)) as http, http.stream("POST", url, json=body) as r:
                status = r.status_code
                for _ in r.iter_lines():
                    pass
        except httpx.TimeoutException:
            pass
        statuses.append(status)

    def leaves_mid_stream(i):
        with httpx.Client(timeout=30) as http, http.stream("POST", url, json=body) as r:
            lines = r.iter_lines()
            seen = 0
            while seen < 3:
                seen += next(lines).startswith("data:")

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        list(pool.map(impatient, range(100)))
        list(pool.map(leaves_mid_stream, range(8)))
    assert len(statuses) == 100 and set(statuses) <= {200, 503, "timeout"}
    with httpx.Client(base_url=f"http://{server.url}", timeout=30) as http:
        _settles(http)
    start = time.monotonic()
    client.completions.create(model="llm", prompt="w5", max_tokens=4, temperature=0)
    assert time.monotonic() - start < 10


BAD = [
    ({"model": "llm", "prompt": "", "max_tokens": 3}, 400, "prompt"),
    ({"model": "llm", "prompt": [3, 128], "max_tokens": 3}, 400, r"outside the vocabulary \[0, 128\)"),
    ({"model": "llm", "prompt": "w5 w6", "max_tokens": 64}, 400, "max_tokens=64 .* room for 63 in max_length=64"),
    ({"model": "llm", "prompt": " ".join(["w5"] * 70), "max_tokens": 1}, 400, "longer than the context"),
    ({"model": "nope", "prompt": "w5"}, 404, "Unknown model 'nope'"),
    ({"model": "llm", "prompt": "w5", "max_tokens": "ten"}, 400, "'max_tokens' must be an integer"),
    ({"model": "llm", "prompt": "w5", "temperature": 3}, 400, "'temperature' must lie in"),
    ({"model": "llm", "prompt": "w5", "n": 129}, 400, "'n' must be at most 128"),
    ({"model": "llm", "prompt": "w5", "logprobs": 6}, 400, "'logprobs' must be at most 5"),
    ({"model": "llm", "prompt": "w5", "colour": "red"}, 400, "Unknown field"),
    ({"model": "llm", "prompt": "w5", "max_tokens": 3, "min_tokens": 4}, 400, "'min_tokens'=4 exceeds 'max_tokens'=3"),
    # NOTE: JSON's true is no 1 and 0 no false
    ({"model": "llm", "prompt": "w5", "n": True}, 400, "'n' must be an integer"),
    ({"model": "llm", "prompt": "w5", "echo": 0}, 400, "'echo' must be true or false"),
    ({"model": "llm", "prompt": "w5", "logprobs": True}, 400, "'logprobs' must be an integer"),
    ({"model": "llm", "prompt": "w5", "stream_options": {"include_usage": True}}, 400, "only for a streamed request"),
]
BAD_CHAT = [
    ({"model": "llm", "messages": [{"role": "wizard", "content": "w5"}]}, 400, "role .* is not one of"),
    ({"model": "llm", "messages": []}, 400, "'messages' must be a non-empty list"),
    ({"model": "llm", "messages": [{"role": "tool", "content": "4"}]}, 400, r"role 'tool'\) must carry 'tool_call_id'"),
    ({"model": "llm", "messages": [{"role": "user", "content": 5}]}, 400, "content must be a string"),
]


def test_bad_input_gets_an_openai_error_and_the_server_keeps_serving(server, client):
    import re

    with httpx.Client(base_url=f"http://{server.url}", timeout=30) as http:
        cases = [("/v1/completions", b, s, m) for b, s, m in BAD] + [
            ("/v1/chat/completions", b, s, m) for b, s, m in BAD_CHAT
        ]
        for path, body, status, message in cases:
            r = http.post(path, json=body)
            assert r.status_code == status, (body, r.text)
            error = r.json()["error"]
            # NOTE: OpenAI's `code` is a string or null, its `type` a string; the status is the response's
            code = "model_not_found" if status == 404 else None
            assert re.search(message, error["message"]) and error["code"] == code and error["type"], (body, error)
        for raw in (b"{not json", b"[1, 2]"):
            r = http.post("/v1/completions", content=raw, headers={"content-type": "application/json"})
            assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
        r = http.post("/v1/completions", json={"model": "llm", "prompt": "w5 " * 30000})
        assert r.status_code == 413
        # NOTE: null is the default for OpenAI's nullable fields, as OpenAI and vLLM take it
        nulls = dict.fromkeys(("n", "echo", "presence_penalty", "frequency_penalty", "logprobs", "seed"))
        r = http.post("/v1/completions", json={"model": "llm", "prompt": "w5", "max_tokens": 2, **nulls})
        assert r.status_code == 200, r.text
    r = client.completions.create(model="llm", prompt="w5 w6", max_tokens=3, temperature=0)
    assert len(r.choices[0].model_extra["token_ids"]) == 3


@pytest.mark.slow
def test_load_nothing_lost_nothing_swapped(server, llm, alone):
    # NOTE: 64 concurrent clients, 480 requests: prompts of 1-40 words, max_tokens 1-24, streaming and not;
    # every completion is its prompt's alone. Bounded in count and time.
    art = llm[1]
    rng = np.random.default_rng(1)
    prompts = [_words(rng, int(rng.integers(1, 41))) for _ in range(96)]
    jobs = [(prompts[i % len(prompts)], int(rng.integers(1, 25)), bool(i % 2)) for i in range(LOAD_REQUESTS)]
    want = [alone(art.encode(p), n) for p, n, _ in jobs]
    client = OpenAI(base_url=f"http://{server.url}/v1", api_key="unused", max_retries=0, timeout=LOAD_BOUND_S)
    deadline = time.monotonic() + LOAD_BOUND_S
    lock, refused = threading.Lock(), [0]

    def one(i):
        prompt, n, stream = jobs[i]
        while time.monotonic() < deadline:
            try:
                if not stream:
                    return (
                        client.completions.create(model="llm", prompt=prompt, max_tokens=n, temperature=0)
                        .choices[0]
                        .model_extra["token_ids"]
                    )
                ids = []
                for c in client.completions.create(
                    model="llm", prompt=prompt, max_tokens=n, temperature=0, stream=True
                ):
                    ids += c.choices[0].model_extra["token_ids"]
                return ids
            except Exception as e:  # NOTE: a 503 past the queue limit is retried; nothing else is
                if getattr(e, "status_code", None) != 503:
                    raise
                with lock:
                    refused[0] += 1
                time.sleep(0.05)
        raise AssertionError(f"request {i} not answered within {LOAD_BOUND_S} s")

    with concurrent.futures.ThreadPoolExecutor(LOAD_CLIENTS) as pool:
        got = list(pool.map(one, range(LOAD_REQUESTS)))
    wrong = [i for i in range(LOAD_REQUESTS) if got[i] != want[i]]
    assert not wrong, f"{len(wrong)} of {LOAD_REQUESTS} completions differ from their prompt alone: {wrong[:5]}"
