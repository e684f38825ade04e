"""Speculative decoding, px.Generator(speculative_config=...): greedy tokens and scores are the plain
generator's for every method, batch size, padding and EOS; sampled tokens follow the target's own filtered
distribution (a chi-square test against Paddle eager's); nothing compiles after warm-up; bad configs are
refused by name. Tiny random-weight PaddleFormers Llamas."""

import jax.numpy as jnp
import numpy as np
import paddle
import pytest

from paddle_xla.api.generator import Generator
from paddle_xla.errors import GenerationError
from paddle_xla.generation.continuous import Request
from paddle_xla.generation.slots import NO_TOKEN
from paddle_xla.generation.speculative import lookup
from paddle_xla.generation.speculative.config import speculative_config
from paddle_xla.generation.speculative.served import SpeculativePagedEngine
from paddle_xla.runtime.compile_cache import compiles_seen

from .paddleformers import module
from .test_continuous import _alone
from .test_generator import TINY, _prompts
from .test_paged import _Subsets, serve

BATCH, SLOTS, K = 4, 40, 3
NGRAM = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 2, "prompt_lookup_min": 1}


def _llama(seed=0, **over):
    mod = module("transformers.llama")
    paddle.seed(seed)
    net = mod.LlamaForCausalLM(mod.LlamaConfig(**{**TINY, **over}))
    net.eval()
    return net


def _gen(net, spec=None, **kw):
    return Generator(
        net, max_batch_size=BATCH, max_length=SLOTS, chunk=4, prefill_chunk=16, speculative_config=spec, **kw
    )


@pytest.fixture(scope="module")
def gens():
    """The plain generator and three speculative ones over one target: prompt lookup, a draft with the target's
    weights (every guess agrees), a draft of its own (1 layer, other weights: guesses mostly refused)."""
    target = _llama()
    return {
        "plain": _gen(target),
        "ngram": _gen(target, NGRAM),
        "twin": _gen(target, {"model": _llama(), "num_speculative_tokens": K}),
        "other": _gen(
            target, {"method": "draft_model", "model": _llama(1, num_hidden_layers=1), "num_speculative_tokens": K}
        ),
    }


EOS = 13  # NOTE: a token the target makes in the middle of the prompts' greedy runs (checked below)
CALLS = [
    dict(max_new_tokens=12),
    dict(max_new_tokens=9, repetition_penalty=1.5),
    dict(max_new_tokens=8, min_new_tokens=5, eos_token_id=EOS),
    dict(max_new_tokens=12, eos_token_id=EOS),
]


@pytest.mark.parametrize("method", ["ngram", "twin", "other"])
@pytest.mark.parametrize("kw", CALLS)
def test_greedy_tokens_and_scores_are_the_plain_generators(gens, method, kw):
    ids, mask = _prompts([5, 9, 3, 12], 12)
    for rows in (slice(0, 4), slice(1, 2)):
        want, want_scores = gens["plain"].generate(ids[rows], attention_mask=mask[rows], **kw)
        got, scores = gens[method].generate(ids[rows], attention_mask=mask[rows], **kw)
        assert got.shape == want.shape and (got == want).all(), (got, want)
        np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-5)


def test_an_eos_inside_a_speculated_run_ends_the_row_there(gens):
    ids, mask = _prompts([5, 9, 3, 12], 12)
    free, _ = gens["plain"].generate(ids, attention_mask=mask, max_new_tokens=12)
    at = [list(row).index(EOS) if EOS in row else None for row in free]
    assert any(a is not None and 0 < a < 11 for a in at), free  # NOTE: the test's premise: an EOS mid-run
    got, _ = gens["twin"].generate(ids, attention_mask=mask, max_new_tokens=12, eos_token_id=EOS)
    for row, a in zip(got, at):
        if a is not None:
            assert row[a] == EOS and (row[a + 1 :] == gens["plain"].defaults.pad_token_id).all()


def test_a_prompt_longer_than_the_prefill_chunk(gens):
    ids, mask = _prompts([20, 7], 20, seed=3)
    want, _ = gens["plain"].generate(ids, attention_mask=mask, max_new_tokens=10)
    for method in ("ngram", "twin"):
        assert (gens[method].generate(ids, attention_mask=mask, max_new_tokens=10)[0] == want).all()


def test_the_counts_say_how_many_guesses_were_kept(gens):
    twin, other = gens["twin"], gens["other"]
    before = twin.speculative_stats
    ids, mask = _prompts([6], 6, seed=5)
    twin.generate(ids, attention_mask=mask, max_new_tokens=17)
    after = twin.speculative_stats
    steps = after["verify_steps"] - before["verify_steps"]
    # NOTE: every guess of the twin agrees: 16 tokens after the first in rounds of K + 1, the last round cut short
    assert steps == 4 and after["accepted_tokens"] - before["accepted_tokens"] == 12
    assert after["method"] == "draft_model" and 0 < after["acceptance_rate"] <= 1
    other.generate(ids, attention_mask=mask, max_new_tokens=17)
    o = other.speculative_stats
    assert o["guessed_tokens"] == K * o["verify_steps"] and o["accepted_tokens"] < o["guessed_tokens"]


def test_prompt_lookup_guesses_what_followed_the_rows_newest_tokens_before():
    h = lookup.history(
        jnp.array([[0, 5, 6, 7, 8, 5], [0, 0, 0, 3, 4, 3]]),
        jnp.array([[0, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1]]),
        jnp.array([6, 4]),
        16,
    )
    # NOTE: row 0's newest 2 tokens (5 6) occurred at its start: 7 8 5 followed; row 1's (3 4) at its start too, with
    # only 3 4 after it (then nothing: no guess); its newest 1 token alone would have guessed as much
    assert lookup.guesses(h, 3, 2, 1).tolist() == [[7, 8, 5], [3, 4, -1]]
    # NOTE: nothing like row 0's newest token (9) occurred before it; a loop guesses itself
    h = lookup.appended(h, jnp.array([[9, -1], [3, 4]]))
    assert lookup.guesses(h, 3, 2, 1).tolist() == [[-1, -1, -1], [3, 4, 3]]
    assert lookup.guesses(h, 3, 3, 3).tolist() == [[-1, -1, -1], [3, 4, -1]]  # NOTE: (4 3 4) at 1: 2 follow


def test_prompt_lookup_keeps_the_guesses_a_repeating_row_makes(gens):
    ngram = gens["ngram"]
    before = ngram.speculative_stats
    # NOTE: greedy decoding of this tiny model falls into a loop (row 0: 26 26 115 115 26 26 26 ...)
    ids, mask = _prompts([5], 5)
    assert ngram.generate(ids, attention_mask=mask, max_new_tokens=16)[0].shape == (1, 16)
    after = ngram.speculative_stats
    kept, steps = (after[k] - before[k] for k in ("accepted_tokens", "verify_steps"))
    # NOTE: each token after the prefill's first is a verify step's own or a kept guess
    assert kept >= 3 and steps + kept == 15


def test_nothing_compiles_after_warm_up(gens):
    for method in ("ngram", "twin"):
        gen = gens[method]
        gen.warm_up()  # NOTE: every bucket's prefill (the target's and the draft's), the chunked one, the rounds
        with compiles_seen() as compiles:
            for n, width in [(3, 9), (17, 12), (9, 16), (5, 33)]:
                ids, mask = _prompts([width, max(1, width - 4)], width, seed=n)
                gen.generate(ids, attention_mask=mask, max_new_tokens=n)
        assert not compiles, f"{method}: {len(compiles)} compiles after warm-up"


def test_a_seed_reproduces_a_sampled_run(gens):
    ids, mask = _prompts([5, 9], 9)
    kw = dict(decode_strategy="sampling", top_k=0, temperature=1.5, max_new_tokens=10)
    one = gens["other"].generate(ids, attention_mask=mask, seed=7, **kw)[0]
    assert (one == gens["other"].generate(ids, attention_mask=mask, seed=7, **kw)[0]).all()
    assert one.tolist() != gens["other"].generate(ids, attention_mask=mask, seed=8, **kw)[0].tolist()


def test_bad_configs_are_refused_by_name():
    target = _llama()
    cases = [
        (
            {"method": "medusa", "num_speculative_tokens": 2},
            r"method='medusa' is not one of \['draft_model', 'ngram', 'mtp'\]",
        ),
        ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens=0 must be an integer >= 1"),
        (
            {"method": "ngram", "num_speculative_tokens": 39},
            "k \\+ 1 = 40 tokens and max_length=40 leaves room for at most 38",
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 3, "prompt_lookup_max": 2},
            "prompt_lookup_min=3 exceeds",
        ),
        ({"method": "ngram", "num_speculative_tokens": 2, "draft": 1}, r"unknown keys \['draft'\]"),
        ({"method": "draft_model", "num_speculative_tokens": 2}, '"draft_model" needs "model"'),
        (
            {"model": _llama(), "num_speculative_tokens": 2, "prompt_lookup_max": 3},
            r"\['prompt_lookup_max'\] apply to method='ngram', not 'draft_model'",
        ),
        ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 33}, "exceeds 32, the longest searched"),
        ({"method": "mtp", "num_speculative_tokens": 1}, "LlamaForCausalLM has num_nextn_predict_layers=0"),
        (
            {"model": _llama(vocab_size=96), "num_speculative_tokens": 2},
            "the draft model's vocabulary has 96 tokens, the target's 128",
        ),
        (
            {"model": Generator(_llama(1), max_batch_size=BATCH, max_length=32), "num_speculative_tokens": 2},
            "max_length=32; the target's has 4, 40",
        ),
    ]
    for spec, message in cases:
        with pytest.raises(GenerationError, match=message):
            _gen(target, spec)


def test_vllms_older_ngram_spellings_mean_prompt_lookup():
    for given in ({"model": "[ngram]"}, {"model": "ngram", "method": "[ngram]"}, {"method": "[ngram]"}):
        config = speculative_config({**given, "num_speculative_tokens": 3, "prompt_lookup_max": 2}, 40)
        assert (config.method, config.model, config.prompt_lookup_max, config.prompt_lookup_min) == (
            "ngram",
            None,
            2,
            2,
        )


ROWS, DRAWS = 2048, 10  # NOTE: 20,480 draws of a row's first 3 tokens
SAMPLING = dict(decode_strategy="sampling", top_k=4, temperature=0.8, repetition_penalty=1.3, max_new_tokens=3)


def _filtered(net, ids):
    """The target's next-token distribution after Paddle's processors (SAMPLING's), by Paddle eager's forward:
    the repetition penalty over the ids so far, temperature, softmax, top-k (ties kept), renormalised."""
    with paddle.no_grad():
        logits = net(paddle.to_tensor(np.array([ids])), return_dict=True).logits.numpy()[0, -1].astype(np.float64)
    seen = np.unique(ids)
    logits[seen] = np.where(logits[seen] < 0, logits[seen] * 1.3, logits[seen] / 1.3)
    p = np.exp((logits - logits.max()) / 0.8)
    p /= p.sum()
    p = np.where(p >= np.sort(p)[-4], p, 0.0)
    return p / p.sum()


def test_sampled_tokens_follow_the_targets_filtered_distribution():
    """A chi-square test of the first 3 tokens of 20,480 rows (one prompt, each row its own key) against Paddle
    eager's distribution of each token after the ones before it. The draft is the target with its LM head
    shrunk and jittered, so that its guesses are kept at times and refused at times (both rules run)."""
    from scipy.stats import chisquare

    target, draft = _llama(), _llama()
    head = draft.lm_head.weight
    noise = np.random.default_rng(0).standard_normal(head.shape).astype("float32")
    head.set_value(head.numpy() * 0.6 + noise * 0.2 * float(head.numpy().std()))
    spec = {"model": draft, "num_speculative_tokens": 2}
    gen = Generator(target, max_batch_size=ROWS, max_length=16, chunk=4, speculative_config=spec)
    prompt = [17, 60, 3, 99]
    ids = np.array([prompt] * ROWS, "int64")
    runs = np.concatenate([gen.generate(ids, seed=s, **SAMPLING)[0] for s in range(DRAWS)])
    stats = gen.speculative_stats
    assert 0.2 < stats["acceptance_rate"] < 0.9, stats
    got, want = {}, {}
    for run in map(tuple, runs):
        got[run] = got.get(run, 0) + 1
    first = _filtered(target, prompt)
    for a in np.flatnonzero(first):
        second = _filtered(target, prompt + [int(a)])
        for b in np.flatnonzero(second):
            third = _filtered(target, prompt + [int(a), int(b)])
            for c in np.flatnonzero(third):
                want[(a, b, c)] = first[a] * second[b] * third[c] * len(runs)
    assert set(got) <= set(want), set(got) - set(want)
    cells = sorted(want)
    observed = np.array([got.get(c, 0) for c in cells], np.float64)
    expected = np.array([want[c] for c in cells])
    assert chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-3


def test_an_artifact_carries_the_draft_and_speculates_without_paddle(gens, tmp_path):
    from paddle_xla.artifact import load
    from paddle_xla.artifact.writer import export

    ids, mask = _prompts([5, 9, 20], 20)
    want, want_scores = gens["plain"].generate(ids, attention_mask=mask, max_new_tokens=9)
    for method in ("twin", "ngram"):
        export(gens[method], str(tmp_path / f"{method}.pxa"))
        art = load(str(tmp_path / f"{method}.pxa"))
        got, scores = art.generate(ids, attention_mask=mask, max_new_tokens=9)
        assert (got == want).all() and np.allclose(scores, want_scores, rtol=0, atol=1e-5)
        stats = art.speculative_stats
        assert stats["method"] == gens[method].speculative_stats["method"] and stats["verify_steps"] > 0
    twin = load(str(tmp_path / "twin.pxa"))
    assert stats["accepted_tokens"] > 0 and twin.speculative.draft is not None
    with pytest.warns(UserWarning, match="does not speculate"):
        art.continuous()
    # NOTE: a server speculates with prompt lookup (verify_any.json); a draft's rows decode a token a step
    assert isinstance(art.paged(block_size=16), SpeculativePagedEngine)
    with pytest.warns(UserWarning, match="does not speculate.*draft_model"):
        assert not isinstance(twin.paged(block_size=16), SpeculativePagedEngine)


def test_served_rows_verify_together_and_get_the_plain_generators_tokens(gens):
    """The paged engine of a prompt-lookup generator (a server's): every request's greedy tokens are the plain
    generator's for its prompt alone (prefix-cache hits and a slot reused after a cancel among them), seeded
    sampled ones' (two choices of one prompt, prefilled once) the offline speculative generator's, a constrained
    one guesses nothing, and the blocks all come back."""
    engine = gens["ngram"].paged(block_size=16)
    assert isinstance(engine, SpeculativePagedEngine) and engine.chunk_tokens == 4 * (K + 1)
    loop = (7, 30, 9, 7, 30, 9, 7, 30)  # NOTE: a prompt that repeats itself: lookup guesses its continuation
    constraint = _Subsets(0, TINY["vocab_size"])
    requests = [
        Request(loop, 14),
        Request(tuple(range(3, 14)), 12, repetition_penalty=1.5),
        Request(loop[:5], 10, min_new_tokens=6),
        Request((4, 5, 4, 5, 4), 9, decode_strategy="sampling", top_k=8, temperature=0.8, seed=7),
        Request((8, 9, 10, 8, 9), 6, constraint=constraint),
        Request(loop * 2 + (40,), 11),  # NOTE: cancelled after a few tokens: its slot and blocks go to the next
        *(Request(loop * 2 + (50 + i,), 9) for i in range(2)),  # NOTE: their first 16 tokens hit the cache
        *(Request((6, 7, 6), 7, "sampling", top_p=0.9, seed=20 + i, choices=2) for i in range(2)),
    ]
    got, buckets, _ = serve(engine, requests, cancel={5: 3})
    assert engine.blocks.stats.hit_tokens_total >= 16 and engine.shared_prompts >= 1
    for i in (0, 1, 2, 6, 7):
        # NOTE: a row's numbers are the verify step's where it guessed, the decode step's where not, whatever its
        # company guessed: the offline speculative generator's for its prompt alone, and here the plain one's
        assert got[i] == _alone(gens["plain"], requests[i]) == _alone(gens["ngram"], requests[i]), (i, got[i])
    for i in (3, 8, 9):
        assert got[i] == _alone(gens["ngram"], requests[i], seed=requests[i].seed), i
    # NOTE: a token a round, each within the set its mask allowed at that step
    assert got[4] == constraint.made and len(constraint.sets) == 6
    assert all(t in ids for t, ids in zip(constraint.made, constraint.sets))
    stats = engine.stats
    assert stats.verify_steps > 0 and 0 < stats.accepted_tokens <= stats.guessed_tokens, stats
    assert engine.blocks.free_blocks == engine.blocks.num_blocks - 1
    # NOTE: to the bit: a row beside one that guesses in other rounds than it does scores what it scores alone
    # (its log-probabilities of every vocabulary entry's logit), and its mean score is the offline generator's
    pair = [Request(tuple(range(3, 14)), 12, logprobs=True), Request(loop, 12, logprobs=True)]
    (tokens, logprobs, means), (alone, alone_logprobs, alone_means) = (
        _run_together(engine, rs) for rs in (pair, pair[:1])
    )
    assert tokens[0] == alone[0] and means[0] == alone_means[0]
    np.testing.assert_array_equal(logprobs[0], alone_logprobs[0])
    for row, r in enumerate(pair):
        _, want = gens["ngram"].generate(np.array([r.ids]), max_new_tokens=r.max_new_tokens)
        assert means[row] == float(want[0, 0]), row


def _run_together(engine, requests):
    """Begin `requests` in sequence slots 0, 1, ... at once and decode until all end: each one's tokens, the
    log-probabilities of its decoded tokens [n, TOP + 1] and its mean score."""
    for row, r in enumerate(requests):
        engine.begin(row, r)
        while engine.fill(row) is None:
            pass
    tokens, scores = [[] for _ in requests], [[] for _ in requests]
    while engine.busy.any():
        out = engine.run_chunk()
        last = engine.scores.last
        for row in range(len(requests)):
            for j in np.flatnonzero(out[row] != NO_TOKEN):
                tokens[row].append(int(out[row][j]))
                scores[row].append(np.concatenate([[last.logprob[row, j]], last.top_logprobs[row, j]]))
    means = [float(np.asarray(engine._paged().seqs.scores)[row]) for row in range(len(requests))]
    return tokens, [np.array(a) for a in scores], means


def test_served_rows_speculate_without_batch_invariance_in_buckets_from_1_row(gens):
    """--no-batch-invariance: rows run in buckets from 1 and more sequences than rows run at once, and the
    greedy tokens are the plain generator's (this tiny model's products round its rows alike at 1 to 6 rows:
    test_paged.py)."""
    engine = gens["ngram"].paged(block_size=16, max_seqs=6, batch_invariant=False)
    loop = (7, 30, 9, 7, 30, 9, 7)
    requests = [Request(loop[: 3 + i], 9 + i) for i in range(5)] + [Request(tuple(range(3, 12)), 8)]
    alone, lone, _ = serve(engine, requests[:1])
    got, buckets, most = serve(engine, requests)
    assert {rows for rows, _ in lone} == {1} and most == 6 > BATCH and (6, 2) in buckets, (lone, most, buckets)
    assert alone[0] == got[0] == _alone(gens["plain"], requests[0])
    assert all(got[i] == _alone(gens["plain"], r) for i, r in enumerate(requests)), got
    assert engine.stats.accepted_tokens > 0 and engine.last_bucket is not None
