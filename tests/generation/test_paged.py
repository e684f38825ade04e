"""The paged engine (generation/paged.py, paged_engine.py): a pool of KV blocks, decode chunks in buckets of
rows and blocks, and each request getting what px.Generator.generate gives its prompt alone."""

import dataclasses

import jax
import numpy as np
import paddle
import pytest

from paddle_xla import x64
from paddle_xla.api.generator import Generator
from paddle_xla.errors import GenerationError
from paddle_xla.generation import all_logits
from paddle_xla.generation import paged as PG
from paddle_xla.generation import token_masks as TM
from paddle_xla.generation.batch_engine import program
from paddle_xla.generation.continuous import Request
from paddle_xla.generation.paged_engine import _checked_line, block_buckets, kv_tokens_in_memory, paged_engine
from paddle_xla.generation.slots import NO_TOKEN
from paddle_xla.generation.speculative.served import SpeculativePagedEngine
from paddle_xla.planner.serving import serving_memory
from paddle_xla.runtime.compile_cache import compiles_seen

from .paddleformers import module
from .test_continuous import PREFILL_CHUNK, _alone, _requests
from .test_generator import BATCH, SLOTS, TINY, _model

BLOCK = 8


@pytest.fixture(scope="module")
def gen():
    return Generator(_model("llama"), max_batch_size=BATCH, max_length=SLOTS, chunk=4, prefill_chunk=PREFILL_CHUNK)


@pytest.fixture(scope="module")
def engine(gen):
    """Batch-invariant: the memory of BATCH rows x SLOTS slots in blocks of 8, chunks of BATCH rows."""
    engine = gen.paged(block_size=BLOCK)
    engine.warm_up()
    return engine


@pytest.fixture(scope="module")
def fast(gen):
    """Not batch-invariant: chunks of 1, 2, 4 or 6 rows, up to 6 sequences in the same memory."""
    engine = gen.paged(block_size=BLOCK, max_seqs=6, batch_invariant=False)
    engine.warm_up()
    return engine


def serve(engine, requests, cancel=None):
    """Drive the engine as a scheduler does: admit waiting requests while they fit, prefill them, run a decode
    chunk; `cancel` = {request index: after how many tokens it is freed}. Returns each one's tokens, the
    buckets the chunks ran in and the most sequences that ran at once."""
    got, rows, waiting = {i: [] for i in range(len(requests))}, {}, list(range(len(requests)))
    buckets, most = set(), 0
    for _ in range(500):
        while waiting and engine.fits_now(requests[waiting[0]]):
            row, i = engine.free_row(), waiting.pop(0)
            engine.begin(row, requests[i])
            while (done := engine.fill(row)) is None:
                pass
            got[i].append(done[0])
            if done[1]:
                rows[row] = i
        engine.blocks.check()
        most = max(most, int(engine.busy.sum()))
        if not waiting and not engine.busy.any():
            return got, buckets, most
        out = engine.run_chunk()
        buckets.add(engine.last_bucket)
        for row, i in list(rows.items()):
            got[i] += [int(t) for t in out[row] if t != NO_TOKEN]
            if cancel and i in cancel and len(got[i]) >= cancel[i]:
                engine.free(row)
            if not engine.busy[row]:
                del rows[row]
    raise AssertionError("the requests did not finish")


def test_requests_get_their_tokens_alone_in_every_bucket_and_nothing_compiles_after_warm_up(gen, engine):
    requests = (
        _requests(0, 10)
        + _requests(1, 3, repetition_penalty=1.3)
        + _requests(2, 2, min_new_tokens=3)
        + _requests(3, 3, decode_strategy="sampling", top_p=0.8, seed=11)
    )
    with compiles_seen() as seen:
        got, buckets, _ = serve(engine, requests)
    assert not seen, seen
    # NOTE: warm-up checked the 2-row step against the full one: a few rows run in it, with the same tokens
    assert engine.row_buckets == (2, BATCH), engine.row_buckets
    assert {rows for rows, _ in buckets} == {2, BATCH} and len({blocks for _, blocks in buckets}) >= 2, buckets
    for i, r in enumerate(requests):
        assert got[i] == _alone(gen, r, **({"seed": r.seed} if r.seed is not None else {})), (i, r)
    assert engine.blocks.free_blocks == engine.blocks.num_blocks - 1


def test_without_batch_invariance_chunks_run_in_fewer_rows_and_more_requests_run_at_once(gen, fast):
    # NOTE: 15 tokens each (2 blocks of 8): the memory of 4 rows x 40 slots holds 10 of them, 6 sequence
    # slots; this tiny model's products round its rows alike at 1 to 6 rows, so the tokens are generate's
    requests = [Request(tuple(range(3 + i, 8 + i)), 10) for i in range(8)] + _requests(4, 4)
    with compiles_seen() as seen:
        runs = [serve(fast, group) for group in (requests[:1], requests[1:3], requests)]
    assert not seen, seen
    assert runs[2][2] == 6 > BATCH, runs[2][2]
    assert [{rows for rows, _ in buckets} for _, buckets, _ in runs[:2]] == [{1}, {2}]
    for group, (got, _, _) in zip((requests[:1], requests[1:3], requests), runs):
        assert all(got[i] == _alone(gen, r) for i, r in enumerate(group))


def test_a_request_waits_while_the_pool_is_full_and_a_cancelled_one_gives_its_blocks_back(gen, engine):
    big = Request(tuple(range(3, 30)), 13)  # NOTE: 40 tokens, 5 blocks: 4 of them fill the 20-block pool
    rows = []
    for _ in range(4):
        assert engine.fits_now(big)
        rows.append(engine.free_row())
        engine.begin(rows[-1], big)
    assert not engine.fits_now(big) and not engine.fits_now(Request((5,), 1))
    with pytest.raises(GenerationError, match="no room"):
        engine.begin(engine.free_row(), big)
    engine.free(rows[0])  # NOTE: cancelled while its prompt goes in
    assert engine.fits_now(big)
    while (engine.fill(rows[1])) is None:
        pass
    engine.run_chunk()
    engine.free(rows[1])  # NOTE: cancelled while decoding
    for row in rows[2:]:
        engine.free(row)
    engine.blocks.check()
    assert not engine.busy.any() and engine.blocks.free_blocks == engine.blocks.num_blocks - 1
    again = Request(tuple(range(40, 60)), 6)
    assert serve(engine, [again])[0][0] == _alone(gen, again)


def test_a_request_that_can_never_fit_names_the_limit_and_the_fix(gen):
    small = gen.paged(kv_cache_tokens=24, block_size=BLOCK)
    with pytest.raises(GenerationError, match=r"needs 5 blocks of 8; the KV cache holds 3 .*--kv-cache-tokens"):
        small.check(Request(tuple(range(3, 30)), 10))
    # NOTE: warm-up prefills a prompt of prefill_chunk + 1 tokens and makes one: 10 tokens, 2 blocks of 8
    with pytest.raises(GenerationError, match=r"cannot hold .* \(10 tokens, 16 in blocks of 8\): give at least 16"):
        gen.paged(kv_cache_tokens=8, block_size=BLOCK)


def test_the_decode_step_gives_a_row_the_same_numbers_in_every_bucket(gen):
    # NOTE: the step captured once with symbolic rows and slots, run on 2 and 4 rows over 16 and 40 cache slots
    # (the row's 11 tokens, then empty slots), gives the concrete step's logits and K/V to the bit
    g = gen.geometry
    run = jax.jit(program(gen.any_bucket_captured().graph, gen.policy, gen.held))
    full = jax.jit(program(gen.decode_captured.graph, gen.policy, gen.held))
    w = gen.held.all_prepared(gen.source_weights)
    rng = np.random.default_rng(0)
    real = (0.3 * rng.standard_normal((2 * g.layers, BATCH, g.kv_heads, 11, g.head_dim))).astype(np.float32)
    ids, pos = rng.integers(3, 100, (BATCH, 1)), np.full((BATCH, 1), 11, np.int64)

    def step(fn, rows, slots):
        past = np.zeros((2 * g.layers, rows, g.kv_heads, slots, g.head_dim), np.float32)
        past[:, :, :, :11] = real[:, :rows]
        mask = np.zeros((rows, slots + 1), np.int64)
        mask[:, :11] = mask[:, -1] = 1
        with x64.scope():
            return [np.asarray(a) for a in fn(w, ids[:rows], mask, pos[:rows], past)]

    logits, kv = step(full, BATCH, SLOTS)
    for rows, slots in ((2, 16), (4, 16), (2, 40)):
        small_logits, small_kv = step(run, rows, slots)
        np.testing.assert_array_equal(small_logits, logits[:rows])
        np.testing.assert_array_equal(small_kv, kv[:, :rows])


def test_warm_up_drops_the_row_buckets_whose_step_rounds_a_row_otherwise(gen):
    # NOTE: a step whose logits move with its row count (as an int8 or half weight's product, or another
    # device's, may) keeps only the full bucket, and says so; steps then run max_batch_size rows
    def rounding_by_rows(name):
        run = program(all_logits.named(gen._graph_of, name), gen.policy, gen.held)
        if name != "decode_any":
            return run

        def step(w, ids, *rest):
            logits, new = run(w, ids, *rest)
            return logits * (1.0 + 1e-6 * (ids.shape[0] < BATCH)), new

        return step

    weights = gen.held.all_prepared(gen.source_weights)
    engine = paged_engine(gen.geometry, gen.defaults, weights, rounding_by_rows, block_size=BLOCK, prefix_cache=False)
    lines = []
    engine.on_compiled = lines.append
    engine.warm_up()
    assert engine.row_buckets == (BATCH,), engine.row_buckets
    assert all(f"({i}/{len(lines)}, " in line for i, line in enumerate(lines, 1)), lines  # NOTE: counted after it
    assert lines[0].startswith(
        f"decode steps of 2 rows round a row otherwise than {BATCH} rows here: they run {BATCH} rows"
    )
    request = Request(tuple(range(3, 12)), 6)
    assert serve(engine, [request])[0][0] == _alone(gen, request)


def test_a_whole_table_stands_in_for_the_power_of_two_just_below_it():
    # NOTE: a table holds max_length + 1 tokens: 64 tokens in blocks of 16 are 5 blocks, 4096 are 257
    assert block_buckets(5) == (1, 2, 5) and block_buckets(257)[-2:] == (128, 257)
    assert block_buckets(6) == (1, 2, 4, 6) and block_buckets(3) == (1, 2, 3) and block_buckets(1) == (1,)


def test_the_row_check_line_names_what_it_dropped_and_not_the_reference_bucket_it_adds():
    # NOTE: max_batch_size 6 is no power of two: the check adds its bucket, which drops nothing
    assert _checked_line((2, 4, 8, 16, 24), (2, 4, 6, 8, 16, 24), 6) == (
        "decode steps of 2, 4, 8, 16, 24 rows give a row the numbers of 6 rows (checked)"
    )
    assert (
        _checked_line((2, 4, 8), (8,), 8)
        == "decode steps of 2, 4 rows round a row otherwise than 8 rows here: they run 8 rows"
    )


def test_a_decode_chunk_updates_the_pool_in_place(engine):
    # NOTE: the step writes the last step's K/V before it reads the pool (paged.step): XLA:CPU copied the whole
    # pool twice per step when the write came after the read
    g = engine.geometry
    hlo = _compiled_chunk(engine, 2, 4, np.full(2, 6, np.int32)).as_text()
    pool = f"f32[{engine.blocks.num_blocks},{g.kv_heads},{BLOCK},{g.head_dim}]"
    copies = [line.strip() for line in hlo.splitlines() if f"= {pool}" in line and " copy(" in line]
    assert not copies, copies


def _prompt_kv(engine, request):
    """Prefill `request` alone, then read its prompt's K/V back from its blocks ([2L, H, n, D]) and free it;
    also the first token and the prompt tokens the prefix cache gave it."""
    hits = engine.blocks.stats.hit_tokens_total
    row = engine.free_row()
    engine.begin(row, request)
    while (done := engine.fill(row)) is None:
        pass
    with x64.scope():
        past = np.asarray(PG.gathered(engine._paged().pool, np.asarray([engine._table(row, engine.table_width)])))
    engine.free(row)
    return past[:, 0, :, : len(request.ids)], done[0], engine.blocks.stats.hit_tokens_total - hits


def test_a_prefix_cache_hit_gives_the_cold_prompts_numbers_to_the_bit(gen, engine):
    # NOTE: chunks of 8 tokens: b shares a's first two chunks and is prefilled from token 16 on, beside
    # blocks a's prefill wrote; its K/V and first token are those of b prefilled cold, with the cache off
    rng = np.random.default_rng(5)
    shared = tuple(int(i) for i in rng.integers(3, 100, 16))
    a = Request(shared + tuple(int(i) for i in rng.integers(3, 100, 11)), 4)
    b = Request(shared + tuple(int(i) for i in rng.integers(3, 100, 9)), 4)
    engine.blocks.prefix_cache = False
    try:
        cold, first, hit = _prompt_kv(engine, b)
    finally:
        engine.blocks.prefix_cache = True
    assert hit == 0
    _prompt_kv(engine, a)
    warm, warm_first, hit = _prompt_kv(engine, b)
    assert hit == 16 and warm_first == first
    np.testing.assert_array_equal(warm, cold)
    engine.blocks.check()


def test_requests_that_share_prefixes_get_their_tokens_alone(gen, engine):
    rng = np.random.default_rng(6)
    system = tuple(int(i) for i in rng.integers(3, 100, 17))
    requests = [Request(system[: 8 + 3 * i] + tuple(int(t) for t in rng.integers(3, 100, 1 + i)), 6) for i in range(4)]
    requests += [Request(system + (7,) * i, 5, decode_strategy="sampling", top_k=5, seed=3) for i in range(1, 4)]
    requests += [Request(system + (9, 9, 4), 6, repetition_penalty=1.5)]  # NOTE: its prefix's ids count as seen
    before = engine.blocks.stats.hit_tokens_total
    with compiles_seen() as seen:
        got, _, _ = serve(engine, requests)
    assert not seen, seen
    assert engine.blocks.stats.hit_tokens_total - before >= 16 * 4, engine.blocks.stats
    for i, r in enumerate(requests):
        assert got[i] == _alone(gen, r, **({"seed": r.seed} if r.seed is not None else {})), (i, r)


def test_the_kv_cache_sized_as_a_fraction_of_the_device_memory_left_after_the_weights(gen):
    class Gpu:
        platform, id = "gpu", 0

        def memory_stats(self):
            return {"bytes_limit": 2**30, "bytes_in_use": 2**28}

    g, weights = gen.geometry, {"w": np.zeros(2**20, np.float32)}  # NOTE: 4 MiB, not on the device yet
    per_token = 2 * g.layers * g.kv_heads * g.head_dim * 4
    tokens = kv_tokens_in_memory(0.5, g, weights, 16, Gpu())
    assert tokens % 16 == 0 and 0 <= 0.5 * (2**30 - 2**28 - 2**22) - tokens * per_token < 16 * per_token
    with pytest.raises(GenerationError, match="does not report its memory.*--kv-cache-tokens"):
        gen.paged(kv_cache_memory=0.5)  # NOTE: XLA:CPU reports none
    with pytest.raises(GenerationError, match="holds no block of 16 tokens"):
        kv_tokens_in_memory(1e-9, g, weights, 16, Gpu())


def _served_alone(engine, request):
    """(tokens, mean score) of `request` served alone in sequence slot 0."""
    engine.begin(0, request)
    while (done := engine.fill(0)) is None:
        pass
    tokens = [done[0]]
    while engine.busy[0]:
        tokens += [int(t) for t in engine.run_chunk()[0] if t != NO_TOKEN]
    return tokens, float(np.asarray(engine._state.seqs.scores)[0])


def test_a_served_request_gets_generates_mean_score_to_the_bit(gen, engine):
    # NOTE: XLA:CPU rounds a product by its row count, so generate prefills its rows one at a time with the
    # batch-1 programs a server inserts a request with (rows_in_turn): a prompt in a bucket, and one prefilled
    # in chunks, score the same bits served and offline
    for request in [Request(tuple(range(3, 9)), 9), Request(tuple(range(5, 30)), 12)] + _requests(6, 3):
        tokens, score = _served_alone(engine, request)
        out, scores = gen.generate(np.array([request.ids]), max_new_tokens=request.max_new_tokens)
        assert tokens == _alone(gen, request) and score == float(scores[0, 0]), (request, score, scores[0, 0])


def test_the_planner_counts_the_pool_and_the_largest_decode_chunks_working_memory(gen, engine):
    # NOTE: the planner's pool as a fraction of a device is the server's (kv_tokens_in_memory); its working
    # memory is within a quarter of what XLA allots the largest decode chunk's program beside its arguments
    shape, weights = engine.serving_shape(), engine.weight_bytes
    assert shape.kv_token_bytes == 2 * gen.geometry.layers * gen.geometry.kv_heads * gen.geometry.head_dim * 4

    class Gpu:
        platform, id = "gpu", 0

        def memory_stats(self):
            return {"bytes_limit": 2**30, "bytes_in_use": 0}

    planned = serving_memory(shape, weights, "gpu", 2**30, kv_cache_memory=0.5)
    assert planned.kv_tokens == kv_tokens_in_memory(0.5, gen.geometry, engine._weights, BLOCK, Gpu())
    assert planned.fits and planned.total_bytes == weights + planned.kv_bytes + shape.work_bytes
    full = serving_memory(shape, weights, "gpu", 2**30, kv_tokens=planned.most_kv_tokens + BLOCK)
    assert not full.fits and "does NOT fit" in full.table()
    temp = _largest_chunk_temp(engine)
    assert 0.75 * temp <= shape.work_bytes <= 1.25 * temp, (temp, shape.work_bytes)


def _compiled_chunk(engine, rows, blocks, index):
    """The decode chunk's program of a (rows, blocks) bucket, compiled (a speculating engine's rounds), for
    sequence slots `index`."""
    g = engine.geometry
    tables, steps, allowed = np.zeros((rows, blocks), np.int32), np.int32(g.chunk), TM.unconstrained(rows, g.vocab_size)
    with x64.scope():
        if isinstance(engine, SpeculativePagedEngine):
            run = engine._spec_fn(rows, blocks)
            args = (engine._sides(), index, tables, steps, allowed, np.ones(rows, bool))
        else:
            run, args = engine._run_fn(rows, blocks), (index, tables, steps, allowed)
        return run.lower(engine._weights_on_device(), engine._paged(), *args).compile()


def _largest_chunk_temp(engine) -> int:
    """What XLA allots the largest bucket's decode chunk beside its arguments."""
    rows, blocks = engine.row_buckets[-1], engine.block_buckets[-1]
    return _compiled_chunk(engine, rows, blocks, np.zeros(rows, np.int32)).memory_analysis().temp_size_in_bytes


class _Subsets:
    """A TokenConstraint that allows 6 random ids (never an EOS) at each step; it keeps what it allowed."""

    def __init__(self, seed: int, vocab: int):
        self.rng, self.vocab, self.sets, self.made = np.random.default_rng(seed), vocab, [], []

    def allowed(self):
        ids = self.rng.choice(np.arange(3, self.vocab), 6, replace=False)
        self.sets.append(ids)
        return TM.allowing(ids, self.vocab)

    def accept(self, token: int) -> None:
        self.made.append(token)


def test_a_constrained_request_takes_the_best_allowed_token_each_step_beside_free_ones(gen, engine):
    """Each token is the argmax of Paddle's logits over the ids its constraint allowed at that step, and the
    unconstrained requests decoding beside it (a token per round now) get their tokens alone."""
    g = engine.geometry
    constrained = [Request(r.ids[:20], 9, constraint=_Subsets(i, g.vocab_size)) for i, r in enumerate(_requests(5, 2))]
    free = _requests(6, 3)
    got, _, _ = serve(engine, constrained + free)
    net = _model("llama")
    for i, r in enumerate(constrained):
        c = r.constraint
        assert got[i] == c.made and len(c.made) == 9 and len(c.sets) == 9
        with paddle.no_grad():
            out = net(paddle.to_tensor([list(r.ids) + c.made[:-1]]))
        logits = (out.logits if hasattr(out, "logits") else out[0]).numpy()[0]
        for t, (token, ids) in enumerate(zip(c.made, c.sets)):
            row = logits[len(r.ids) - 1 + t]
            assert token == ids[np.argmax(row[ids])], (i, t)
    for j, r in enumerate(free):
        assert got[len(constrained) + j] == _alone(gen, r)
    assert engine.blocks.free_blocks == engine.blocks.num_blocks - 1


def test_a_requests_choices_prefill_their_prompt_once_and_get_their_tokens_alone(gen, engine):
    """n choices (each a Request with its own seed): the first is prefilled, the others take its prompt's view
    and last logits and choose their own first token (another_choice), to the bit what prefilling again
    gives: each gets generate's tokens for its seed alone. A prompt of one bucket and a chunked one."""
    before = engine.shared_prompts
    rng = np.random.default_rng(11)
    choices = [
        Request(tuple(int(t) for t in rng.integers(3, 100, n)), 6, "sampling", top_p=0.9, seed=40 + i, choices=3)
        for n in (5, 20)
        for i in range(3)
    ]
    choices = [dataclasses.replace(c, ids=choices[3 * (k // 3)].ids) for k, c in enumerate(choices)]
    got, _, _ = serve(engine, choices)
    assert engine.shared_prompts - before == 4
    for i, r in enumerate(choices):
        assert got[i] == _alone(gen, r, seed=r.seed), i
    assert engine.blocks.free_blocks == engine.blocks.num_blocks - 1
    # NOTE: begun together and filled a step at a time in turn (a scheduler with streams running): the chunked
    # prompt's other choices wait for the first one's chunks, then take them
    rows, firsts = [], {}
    for r in choices[3:]:
        rows.append(engine.free_row())
        engine.begin(rows[-1], r)
    while len(firsts) < len(rows):
        for row in [row for row in rows if row not in firsts]:
            if (done := engine.fill(row)) is not None:
                firsts[row] = done[0]
    assert engine.shared_prompts - before == 6
    assert [firsts[row] for row in rows] == [got[i][0] for i in range(3, 6)]
    for row in rows:
        engine.free(row)


@pytest.mark.parametrize("speculative", [None, {"method": "ngram", "num_speculative_tokens": 3}])
def test_the_planner_never_undercounts_a_large_vocabularys_sampling_arrays(speculative):
    # NOTE: at a vocabulary of 4096 the logits and the sampling's copies of them are most of a decode chunk's
    # working memory (the planner once counted a third of it); a speculating step computes 4 positions a row
    paddle.seed(0)
    mod = module("transformers.llama")
    net = mod.LlamaForCausalLM(mod.LlamaConfig(**{**TINY, "vocab_size": 4096, "num_hidden_layers": 1}))
    net.eval()
    gen = Generator(net, max_batch_size=4, max_length=40, chunk=4, prefill_chunk=8, speculative_config=speculative)
    engine = gen.paged(block_size=BLOCK)
    temp, work = _largest_chunk_temp(engine), engine.serving_shape().work_bytes
    assert temp <= work <= 1.25 * temp, (temp, work)
