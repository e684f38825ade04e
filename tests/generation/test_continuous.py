"""Continuous batching (generation/slots.py, continuous.py): requests join and leave a running decode batch,
and each gets what px.Generator.generate gives its prompt alone."""

import dataclasses

import numpy as np
import pytest

from paddle_xla.api.generator import Generator
from paddle_xla.errors import GenerationError
from paddle_xla.generation.batch_engine import program
from paddle_xla.generation.continuous import ContinuousEngine, Request
from paddle_xla.generation.slots import NO_TOKEN
from paddle_xla.runtime.compile_cache import compiles_seen

from .test_generator import BATCH, SLOTS, TINY, _model

VOCAB = TINY["vocab_size"]


PREFILL_CHUNK = 8


@pytest.fixture(scope="module")
def gen():
    return Generator(_model("llama"), max_batch_size=BATCH, max_length=SLOTS, chunk=4, prefill_chunk=PREFILL_CHUNK)


def _requests(rng_seed, n, **kw):
    # NOTE: prompts of 1-27 tokens (bucket 8, or 2-4 prefill chunks of 8), as many new tokens as the cache
    # leaves room for, up to 13
    rng = np.random.default_rng(rng_seed)
    out = []
    for _ in range(n):
        ids = tuple(int(i) for i in rng.integers(3, VOCAB, rng.integers(1, 28)))
        out.append(Request(ids, min(int(rng.integers(1, 14)), SLOTS - len(ids) + 1), **kw))
    return out


def _alone(gen, request: Request, **kw):
    out, _ = gen.generate(
        np.array([request.ids]),
        max_new_tokens=request.max_new_tokens,
        decode_strategy=request.decode_strategy,
        temperature=request.temperature,
        top_k=request.top_k,
        top_p=request.top_p,
        repetition_penalty=request.repetition_penalty,
        min_new_tokens=request.min_new_tokens,
        **kw,
    )
    row = [int(t) for t in out[0]]
    eos = gen.defaults.eos_token_id
    ends = [i for i, t in enumerate(row) if t in eos]
    return row[: ends[0] + 1] if ends else row


def serve(engine, requests, admit_per_chunk=1, cancel=None, steps=None, beside=False, scores=None):
    """Drive the engine as a scheduler does: begin up to `admit_per_chunk` waiting requests in free rows and
    run one prefill step of each prompt going in between decode chunks; `cancel` = {request index: after
    how many tokens it is freed}; `steps`: a list that gets each round's (prefill steps run, rows that got
    tokens); `beside`: with streams running, the first prompt's prefill step goes with the decode chunk
    (engine.step_and_fill), as the server runs it; `scores`: a dict that gets each request's tokens' TokenScores
    where it asked for logprobs (engine.scores). Returns each one's tokens."""
    got, rows, waiting, filling = {i: [] for i in range(len(requests))}, {}, list(range(len(requests))), {}

    def landed(row, i, done):
        if done is not None:
            del filling[row]
            got[i].append(done[0])
            if row in engine.scores.first and scores is not None:
                scores.setdefault(i, []).append(engine.scores.first.pop(row))
            if done[1]:
                rows[row] = i

    for _ in range(500):
        for _ in range(admit_per_chunk):
            row = engine.free_row()
            if not waiting or row is None:
                break
            filling[row] = waiting.pop(0)
            engine.begin(row, requests[filling[row]])
        fills, out = list(filling.items()), None
        if beside and rows and fills:
            (row, i), fills = fills[0], fills[1:]
            done, out = engine.step_and_fill(row)
            landed(row, i, done)
        for row, i in fills:
            landed(row, i, engine.fill(row))
        if not waiting and not engine.busy.any() and out is None:
            return got
        out = engine.run_chunk() if out is None else out
        if steps is not None:
            steps.append((len(filling), sorted(r for r in rows if (out[r] != NO_TOKEN).any())))
        for row, i in list(rows.items()):
            got[i] += [int(t) for t in out[row] if t != NO_TOKEN]
            if scores is not None and requests[i].logprobs:
                last = engine.scores.last
                scores[i] += [type(last)(*(a[row, j] for a in last)) for j, t in enumerate(out[row]) if t != NO_TOKEN]
            if cancel and i in cancel and len(got[i]) >= cancel[i]:
                engine.free(row)
            if not engine.busy[row]:
                del rows[row]
    raise AssertionError("the requests did not finish")


def test_greedy_requests_get_their_tokens_alone_whatever_their_company(gen):
    # NOTE: 10 requests over 4 rows, joining one per chunk: rows fill, end at different steps and are reused
    requests = _requests(0, 10) + _requests(1, 3, repetition_penalty=1.3) + _requests(2, 2, min_new_tokens=3)
    got = serve(gen.continuous(), requests)
    for i, r in enumerate(requests):
        assert got[i] == _alone(gen, r), (i, r)


def test_a_long_prompt_goes_in_a_chunk_per_decode_chunk_while_others_stream(gen):
    # NOTE: a 27-token prompt takes 4 prefill steps of 8 tokens; the stream already running gets tokens
    # from the decode chunk after each of them, and both get what their prompt gets alone
    engine = gen.continuous()
    requests = [Request((5, 6, 7), 30), Request(tuple(range(3, 30)), 5)]
    assert engine.geometry.chunks(27) == 4 and engine.geometry.chunks(8) == 1
    steps = []
    got = serve(engine, requests, steps=steps)
    assert [rows for _, rows in steps[:4]] == [[0]] * 4 and [n for n, _ in steps[1:4]] == [1, 1, 1]
    assert steps[4][1] == [0, 1]
    for i, r in enumerate(requests):
        assert got[i] == _alone(gen, r)


def test_a_request_cancelled_while_its_prompt_goes_in_frees_its_row(gen):
    engine = gen.continuous()
    row = engine.free_row()
    assert engine.begin(row, Request(tuple(range(3, 30)), 5)) == 4
    assert engine.fill(row) is None and engine.busy[row]
    engine.run_chunk()
    assert engine.busy[row]  # still reserved: its prompt is half in
    engine.free(row)
    assert not engine.busy.any()
    again = Request(tuple(range(40, 60)), 6)
    assert serve(engine, [again])[0] == _alone(gen, again)


def test_a_request_ends_at_the_models_eos(gen):
    # NOTE: eos chosen as a token the prompt's free run makes, so that the request ends early
    free = _alone(gen, Request((5, 9, 14), 12), eos_token_id=[])
    eos = free[3]
    engine = ContinuousEngine(
        gen.geometry,
        dataclasses.replace(gen.defaults, eos_token_id=(eos,)),
        program(gen.decode_captured.graph, gen.policy, gen.held),
        lambda b: program(gen.prefill1_captured(b).graph, gen.policy, gen.held),
        gen.held.all_prepared(gen.source_weights),
        extend1=program(gen.extend_captured(1).graph, gen.policy, gen.held),
    )
    got = serve(engine, _requests(3, 2) + [Request((5, 9, 14), 12)] + _requests(3, 3))
    assert got[2] == free[: free.index(eos) + 1] and len(got[2]) < 12
    assert not engine.busy.any()


def test_a_seeded_sampled_request_is_the_same_with_or_without_company(gen):
    engine = gen.continuous()
    mine = Request((7, 8, 9, 10), 12, decode_strategy="sampling", temperature=1.3, top_k=20, top_p=0.9, seed=5)
    alone = serve(engine, [mine])[0]
    crowd = _requests(4, 5) + _requests(5, 2, decode_strategy="sampling", seed=1)
    together = serve(engine, crowd[:2] + [mine] + crowd[2:], admit_per_chunk=3)
    assert together[2] == alone
    unseeded = dataclasses.replace(mine, seed=None)
    assert serve(engine, [unseeded])[0] != serve(engine, [unseeded])[0]  # fresh draws without a seed


def test_a_freed_row_is_reused_without_its_old_cache_leaking(gen):
    engine = gen.continuous()
    requests = [Request(tuple(range(3, 3 + n)), 14) for n in (4, 9, 16, 2)] + _requests(7, 4)
    got = serve(engine, requests, admit_per_chunk=4, cancel={0: 3, 1: 5, 2: 2, 3: 9})
    assert not engine.busy.any()
    for i in range(4):
        assert got[i] == _alone(gen, requests[i])[: len(got[i])] and len(got[i]) < 14
    for i in range(4, 8):
        assert got[i] == _alone(gen, requests[i])


def test_no_compile_after_warm_up(gen):
    engine = gen.continuous()
    engine.warm_up()
    with compiles_seen() as compiles:
        serve(engine, _requests(8, 6) + _requests(9, 3, decode_strategy="sampling", top_p=0.7), admit_per_chunk=2)
    assert not compiles, f"{len(compiles)} compiles after warm-up"


def test_bad_requests_name_the_limit(gen):
    engine = gen.continuous()
    with pytest.raises(GenerationError, match="prompt is empty"):
        engine.check(Request((), 4))
    with pytest.raises(GenerationError, match=r"token id 128 is outside the vocabulary \[0, 128\)"):
        engine.check(Request((3, 128), 4))
    with pytest.raises(GenerationError, match="longer than the context .max_length=40"):
        engine.check(Request((3,) * 41, 4))
    with pytest.raises(GenerationError, match="max_new_tokens=30 does not fit the context"):
        engine.check(Request((3,) * 20, 30))
    assert engine.check(Request((3,) * 20, 21)).max_new_tokens == 21  # NOTE: padding takes no slot
    with pytest.raises(GenerationError, match="top_p=1.5"):
        engine.check(Request((3,), 4, decode_strategy="sampling", top_p=1.5))


def test_the_decode_loop_updates_the_cache_in_place(gen):
    # NOTE: the cache is the loop's one large buffer; a full copy of it per step doubled the step's time
    # at 32 rows x 768 slots (slots.step writes a step's K/V at the start of the next step for this)
    from paddle_xla import x64
    from paddle_xla.generation import slots as SL

    engine, g = gen.engine, gen.engine.geometry
    shape = (2 * g.layers, g.max_batch_size, g.kv_heads, g.max_length, g.head_dim)
    run = engine._run_fn(tuple(engine.defaults.eos_token_id), engine.defaults.pad_token_id)
    with x64.scope():
        hlo = run.lower(engine._device_params(), SL.empty(shape, g.cache_dtype, g.vocab_size)).compile().as_text()
    cache_type = "f32[" + ",".join(map(str, shape)) + "]"
    copies = [line.strip() for line in hlo.splitlines() if f"= {cache_type}" in line and " copy(" in line]
    assert not copies, copies


def test_a_prefill_chunk_writes_its_row_without_copying_the_cache(gen):
    # NOTE: read and written back in one program, the whole cache was copied twice per chunk
    # (2 x 600 MB at 32 rows x 768 slots): the chunk reads it, a program of its own writes the row back
    from paddle_xla import x64

    engine = gen.continuous()
    engine.warm_up()
    row = engine.free_row()
    engine.begin(row, Request(tuple(range(3, 30)), 5))
    f = engine._filling[row]
    ids, mask = f.steps[0]
    absorb, put = engine.chunk_programs
    state, weights = engine._state(), engine._weights_on_device()
    with x64.scope():
        view, _, _ = absorb(
            weights, state, np.int32(row), ids, mask, np.bool_(True), np.bool_(False), f.limit, f.params, f.key
        )
        hlos = [
            absorb.lower(
                weights, state, np.int32(row), ids, mask, np.bool_(True), np.bool_(False), f.limit, f.params, f.key
            )
            .compile()
            .as_text(),
            put.lower(state, np.int32(row), view).compile().as_text(),
        ]
    cache_type = "f32[" + ",".join(map(str, state.past[0].shape)) + "]"
    for hlo in hlos:
        copies = [line.strip() for line in hlo.splitlines() if f"= {cache_type}" in line and " copy(" in line]
        assert not copies, copies
    engine.free(row)


# ---- a prefill step beside a decode step (engine.step_and_fill: one program, shared products) ----------
@pytest.fixture(scope="module")
def gen1():
    """As gen, with a decode chunk of one step (a server's setting for steady tokens)."""
    return Generator(_model("llama"), max_batch_size=BATCH, max_length=SLOTS, chunk=1, prefill_chunk=PREFILL_CHUNK)


@pytest.mark.parametrize("which", ["gen", "gen1"])
def test_a_prefill_step_beside_a_decode_step_gives_each_request_its_tokens_alone(which, request):
    # NOTE: buckets and chunks both go in beside running streams; a decode chunk of 4 follows the shared step
    gen = request.getfixturevalue(which)
    engine = gen.continuous()
    assert engine._together is not None
    # NOTE: the second request's short prompt goes in beside the first's decode steps (its bucket's program),
    # whatever the random ones after it do
    requests = (
        [Request((5, 6, 7), 30), Request((9, 10, 11, 12), 5)]
        + _requests(0, 10)
        + _requests(1, 3, repetition_penalty=1.3)
        + _requests(2, 2, min_new_tokens=3)
    )
    steps = []
    got = serve(engine, requests, steps=steps, beside=True)
    assert sum(n for n, _ in steps) >= 5 and set(engine._besides) >= {None, 8}
    for i, r in enumerate(requests):
        assert got[i] == _alone(gen, r), (i, r)


def test_a_seeded_sampled_request_beside_prefills_is_the_same_as_alone(gen1):
    engine = gen1.continuous()
    mine = Request((7, 8, 9, 10), 12, decode_strategy="sampling", temperature=1.3, top_k=20, top_p=0.9, seed=5)
    alone = serve(engine, [mine])[0]
    crowd = _requests(4, 5) + _requests(5, 2, decode_strategy="sampling", seed=1)
    assert serve(engine, crowd[:2] + [mine] + crowd[2:], beside=True)[2] == alone


def test_the_step_beside_a_prefill_multiplies_both_in_one_product_without_copying_the_cache(gen1):
    # NOTE: a linear layer's product holds the step's BATCH rows and the prompt's tokens: one weight read per
    # layer instead of two. Lowered apart, no product has BATCH + tokens rows
    from paddle_xla import x64

    engine = gen1.continuous()
    engine.warm_up()
    state, weights = engine._state(), engine._weights_on_device()
    cache_type = "f32[" + ",".join(map(str, state.past[0].shape)) + "]"
    for n, width in ((20, PREFILL_CHUNK), (6, 8)):
        row = engine.free_row()
        engine.begin(row, Request(tuple(range(3, 3 + n)), 5))
        f = engine._filling[row]
        ids, mask = f.steps[0]
        fill = (ids, mask, np.bool_(True), np.bool_(False)) if n > PREFILL_CHUNK else (ids, mask)
        with x64.scope():
            hlo = (
                engine._beside_fn(None if n > PREFILL_CHUNK else width)
                .lower(weights, state, np.int32(row), *fill, f.limit, f.params, f.key)
                .compile()
                .as_text()
            )
        dots = [line for line in hlo.splitlines() if " dot(" in line]
        assert sum(f"f32[{BATCH + width}," in line for line in dots) >= 4 * TINY["num_hidden_layers"], dots
        copies = [line.strip() for line in hlo.splitlines() if f"= {cache_type}" in line and " copy(" in line]
        assert not copies, copies
        engine.free(row)


def test_no_compile_after_warm_up_beside_prefills(gen1):
    engine = gen1.continuous()
    engine.warm_up()
    with compiles_seen() as compiles:
        serve(
            engine,
            _requests(8, 6) + _requests(9, 3, decode_strategy="sampling", top_p=0.7),
            admit_per_chunk=2,
            beside=True,
        )
    assert not compiles, f"{len(compiles)} compiles after warm-up"


def paddle_logprobs(net, ids) -> np.ndarray:
    """log_softmax of the Paddle model's logits at every position of `ids`: [T, V] float64."""
    import paddle

    with paddle.no_grad():
        out = net(paddle.to_tensor([list(ids)]))
    logits = out.logits if hasattr(out, "logits") else out[0]
    return paddle.nn.functional.log_softmax(logits.astype("float32"), axis=-1).numpy()[0].astype(np.float64)


def test_logprobs_are_paddles_log_softmax_through_every_prefill_path_and_engine(gen):
    """A request that asks for logprobs gets, for each token it makes (its first from a whole or chunked prefill,
    beside a decode step or not, then from decode chunks), Paddle's log_softmax of the model's logits there
    (before temperature), and the top alternatives; the continuous and the paged engine give the same."""
    mine = [
        Request((5, 6, 7), 9, logprobs=True),
        Request(tuple(range(3, 23)), 6, decode_strategy="sampling", temperature=1.5, seed=3, logprobs=True),
    ]
    requests = _requests(0, 2) + mine[:1] + _requests(1, 2) + mine[1:]
    engines = {"continuous": gen.continuous(), "paged": gen.paged()}
    found = {}
    for name, engine in engines.items():
        scores = {}
        got = serve(engine, requests, beside=True, scores=scores)
        assert sorted(scores) == [2, 5]
        for i in scores:
            made = scores[i]
            assert len(made) == len(got[i])
            want = paddle_logprobs(gen.model, requests[i].ids + tuple(got[i]))
            for j, (token, s) in enumerate(zip(got[i], made)):
                row = want[len(requests[i].ids) - 1 + j]
                assert abs(float(s.logprob) - row[token]) < 1e-4
                np.testing.assert_allclose(s.top_logprobs, np.sort(row)[::-1][:20], atol=1e-4)
                np.testing.assert_allclose(row[s.top_ids], s.top_logprobs, atol=1e-4)
        found[name] = (got, scores)
    assert found["continuous"][0] == found["paged"][0]
    for i in (2, 5):
        for a, b in zip(found["continuous"][1][i], found["paged"][1][i]):
            np.testing.assert_allclose(a.logprob, b.logprob, atol=1e-5)


@pytest.mark.parametrize("chunked", [True, False])
def test_a_prompts_scores_are_paddles_log_softmax_in_chunks_or_whole(chunked, gen):
    """engine.score_prompt (echo with logprobs): each prompt token's log-probability after the ones before it
    and each position's top alternatives, from prefill chunks of 8 (the last one padded) or one prefill bucket."""
    if not chunked:
        gen = Generator(gen.model, max_batch_size=BATCH, max_length=SLOTS, chunk=4, prefill_chunk=128)
    assert gen.geometry.chunked == chunked
    net, engine = gen.model, gen.paged()
    for n in (1, 8, 19):
        ids = [int(i) for i in np.random.default_rng(n).integers(3, VOCAB, n)]
        got = engine.score_prompt(ids)
        want = paddle_logprobs(net, ids)
        np.testing.assert_allclose(got.logprob[:-1], want[np.arange(n - 1), ids[1:]], atol=1e-4)
        np.testing.assert_allclose(got.top_logprobs, np.sort(want, axis=1)[:, ::-1][:, :20], atol=1e-4)
        np.testing.assert_allclose(np.take_along_axis(want, got.top_ids, axis=1), got.top_logprobs, atol=1e-4)
