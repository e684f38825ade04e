"""One decode step's token choice against PaddleFormers' own logits processors and sampling filters."""

import jax
import jax.numpy as jnp
import numpy as np
import paddle
import pytest
from scipy import stats

from paddle_xla.errors import GenerationError
from paddle_xla.generation import row_logits as L
from paddle_xla.generation import token_masks as TM
from paddle_xla.generation.batch_engine import rows_of
from paddle_xla.generation.config import DecodeConfig, decode_config
from paddle_xla.generation.continuous import Request
from paddle_xla.generation.slots import finish

from .paddleformers import module

VOCAB, BATCH = 40, 4


def _logits(seed=0, batch=BATCH, vocab=VOCAB, scale=2.0):
    return (np.random.default_rng(seed).standard_normal((batch, vocab)) * scale).astype("float32")


def _ids(seed=1, batch=BATCH, length=9):
    # NOTE: ids repeat within rows (and include the pad id 0), as prompts with padding do
    return np.random.default_rng(seed).integers(0, 12, (batch, length)).astype("int64")


def _pf_processed(logits, ids, cfg, prompt_len):
    lp = module("generation.logits_process")
    procs = lp.LogitsProcessorList()
    if cfg.min_new_tokens:
        procs.append(lp.MinLengthLogitsProcessor(prompt_len + cfg.min_new_tokens, cfg.eos_token_id[0]))
    if cfg.repetition_penalty != 1.0:
        procs.append(lp.RepetitionPenaltyLogitsProcessor(cfg.repetition_penalty))
    return procs(paddle.to_tensor(ids), paddle.to_tensor(logits)).numpy()


@pytest.mark.parametrize("penalty,min_new,generated", [(1.0, 0, 0), (1.3, 0, 2), (0.7, 3, 1), (1.3, 3, 3), (1.0, 2, 5)])
def test_processed_logits_match_paddleformers(penalty, min_new, generated):
    cfg = DecodeConfig(repetition_penalty=penalty, min_new_tokens=min_new, eos_token_id=(5,))
    logits, ids = _logits(), _ids()
    prompt_len = ids.shape[1] - generated
    want = _pf_processed(logits, ids, cfg, prompt_len)
    got = L.processed(
        jnp.asarray(logits),
        rows_of(cfg, BATCH, VOCAB),
        L.seen_tokens(jnp.asarray(ids), VOCAB),
        jnp.full(BATCH, generated, jnp.int32),
        cfg.eos_token_id,
    )
    # NOTE: XLA:CPU divides by the penalty within 1 ulp of Paddle's float32 division
    np.testing.assert_allclose(np.asarray(got), want, rtol=2.5e-7, atol=0)
    changed = got != jnp.asarray(logits)
    assert bool(changed.any()) == (penalty != 1.0 or min_new > generated)


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(1.0, 0, 1.0), (1.0, 50, 1.0), (0.7, 5, 1.0), (1.0, 0, 0.8), (1.3, 10, 0.6), (0.5, 1, 0.9), (1.0, 0, 0.05)],
)
def test_sampling_filters_match_paddleformers(temperature, top_k, top_p):
    lp = module("generation.logits_process")
    logits = _logits(seed=2)
    probs = paddle.nn.functional.softmax(
        paddle.to_tensor(logits) / temperature if temperature != 1.0 else paddle.to_tensor(logits)
    )
    if top_k:
        probs = lp.TopKProcess(probs, top_k, 1)
    if top_p < 1.0:
        probs = lp.TopPProcess(probs, top_p, 1)
    cfg = DecodeConfig(decode_strategy="sampling", temperature=temperature, top_k=top_k, top_p=top_p)
    got = np.asarray(L.sampling_probs(jnp.asarray(logits), rows_of(cfg, BATCH, VOCAB)))
    want = probs.numpy()
    np.testing.assert_array_equal(got == 0, want == 0)  # the same tokens filtered out
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_top_k_keeps_ties_and_top_p_keeps_the_crossing_token():
    probs = jnp.asarray([[0.3, 0.2, 0.2, 0.2, 0.1]])
    assert np.asarray(L.top_k_filter(probs, jnp.asarray([2])) > 0).tolist() == [[True, True, True, True, False]]
    # cumulative 0.3, 0.5, ...: the second token takes the sum past 0.4 and is kept, the rest go
    assert np.asarray(L.top_p_filter(probs, jnp.asarray([0.4])) > 0).sum() == 2
    # a cumulative sum exactly at top_p does not cross it (PaddleFormers' strict >): the next token stays too
    even = jnp.full((1, 4), 0.25)
    assert np.asarray(L.top_p_filter(even, jnp.asarray([0.5])) > 0).sum() == 3


def test_greedy_picks_the_argmax_and_scores_its_processed_logit():
    cfg = DecodeConfig(repetition_penalty=1.2)
    logits, ids = _logits(seed=3), _ids(seed=4)
    processed = _pf_processed(logits, ids, cfg, ids.shape[1])
    tokens, terms = L.choose(
        jnp.asarray(logits),
        rows_of(cfg, BATCH, VOCAB),
        L.seen_tokens(jnp.asarray(ids), VOCAB),
        jnp.zeros(BATCH, jnp.int32),
        _keys(0, BATCH),
        (),
    )
    np.testing.assert_array_equal(np.asarray(tokens), processed.argmax(-1))
    np.testing.assert_allclose(np.asarray(terms), processed.max(-1), rtol=2.5e-7)


def test_sampled_tokens_follow_the_filtered_distribution():
    # NOTE: 20,000 draws of one row: no token outside the top-k/top-p set, and the counts pass a
    # chi-square test against the filtered, renormalised softmax (fixed key: the same draws every run).
    cfg = DecodeConfig(decode_strategy="sampling", temperature=0.8, top_k=8, top_p=0.9)
    row = _logits(seed=5, batch=1, vocab=VOCAB, scale=1.0)
    n = 20_000
    logits = jnp.asarray(np.repeat(row, n, axis=0))
    seen = jnp.zeros((n, VOCAB), bool)
    tokens, terms = L.choose(logits, rows_of(cfg, n, VOCAB), seen, jnp.zeros(n, jnp.int32), _keys(0, n), ())
    expected = np.asarray(L.sampling_probs(jnp.asarray(row), rows_of(cfg, 1, VOCAB)))[0].astype(np.float64)
    expected = expected / expected.sum()
    counts = np.bincount(np.asarray(tokens), minlength=VOCAB)
    assert counts[expected == 0].sum() == 0
    kept = expected > 0
    assert 2 <= kept.sum() <= 8
    want = expected[kept] / expected[kept].sum() * n
    p = stats.chisquare(counts[kept], want).pvalue
    assert p > 1e-3, f"draws do not follow the filtered distribution (chi-square p={p:.2e})"
    # the score term is the log-probability before temperature and filtering
    log_probs = np.asarray(jax.nn.log_softmax(jnp.asarray(row), axis=-1))[0]
    np.testing.assert_allclose(np.asarray(terms), log_probs[np.asarray(tokens)], rtol=1e-6)


def test_sampling_draws_differ_by_key():
    cfg = DecodeConfig(decode_strategy="sampling", top_k=0)
    logits = jnp.asarray(_logits(seed=6, batch=64, scale=0.5))
    seen = jnp.zeros((64, VOCAB), bool)
    rows, t = rows_of(cfg, 64, VOCAB), jnp.zeros(64, jnp.int32)
    a, _ = L.choose(logits, rows, seen, t, _keys(1, 64), ())
    b, _ = L.choose(logits, rows, seen, t, _keys(1, 64), ())
    c, _ = L.choose(logits, rows, seen, t, _keys(2, 64), ())
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_each_row_follows_its_own_arguments_and_key():
    # NOTE: a greedy row next to sampled ones gets the argmax; a sampled row's draw depends on its key alone
    logits = jnp.asarray(_logits(seed=8, batch=3, scale=0.5))
    seen, t = jnp.zeros((3, VOCAB), bool), jnp.zeros(3, jnp.int32)
    mixed = rows_of(DecodeConfig(decode_strategy="sampling", top_k=0), 3, VOCAB)._replace(
        sampling=jnp.asarray([False, True, True])
    )
    keys = _keys(3, 3)
    tokens, _ = L.choose(logits, mixed, seen, t, keys, ())
    assert int(tokens[0]) == int(jnp.argmax(logits[0]))
    other = keys.at[2].set(jax.random.PRNGKey(99))
    again, _ = L.choose(logits, mixed, seen, t, other, ())
    assert int(again[1]) == int(tokens[1])


def _keys(seed, n):
    return jax.random.split(jax.random.PRNGKey(seed), n)


def test_finish_matches_paddleformers_scores_and_eos():
    # NOTE: three steps of a batch of 3 with eos 7: row 0 ends at step 1, row 2 at step 2
    utils = module("generation.utils")
    cfg = DecodeConfig(eos_token_id=(7,), pad_token_id=0)
    steps = [([3, 7, 4], [0.5, 1.0, -0.2]), ([7, 2, 7], [2.0, 0.25, 0.75]), ([5, 6, 1], [1.5, -1.0, 3.0])]
    scores, unfinished, limit = jnp.zeros(3), jnp.ones(3, bool), jnp.full(3, 99, jnp.int32)
    pf_scores, pf_flag = paddle.zeros([3, 1]), paddle.ones([3, 1], dtype="bool")
    pf_ids = paddle.zeros([3, 0], dtype="int64")
    for t, (tokens, terms) in enumerate(steps):
        got, scores, unfinished = finish(
            jnp.asarray(tokens),
            jnp.asarray(terms),
            scores,
            unfinished,
            jnp.full(3, t, jnp.int32),
            limit,
            cfg.eos_token_id,
            cfg.pad_token_id,
        )
        nxt = paddle.where(pf_flag, paddle.to_tensor(tokens).unsqueeze(-1), paddle.full([3, 1], 0, "int64"))
        pf_scores = utils.GenerationMixin.update_scores_for_generation(
            pf_scores, paddle.to_tensor(terms, dtype="float32").unsqueeze(-1), t, pf_flag
        )
        pf_ids = paddle.concat([pf_ids, nxt], axis=1)
        pf_flag = utils.get_unfinished_flag(pf_ids, pf_flag, 7)
        np.testing.assert_array_equal(np.asarray(got), nxt.numpy()[:, 0])
        np.testing.assert_allclose(np.asarray(scores), pf_scores.numpy()[:, 0], rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(unfinished), pf_flag.numpy()[:, 0])


def test_config_follows_paddleformers_rules_and_refuses_clearly():
    assert DecodeConfig().top_k == 50 and DecodeConfig().max_new_tokens == 20
    assert decode_config(max_length=7).max_new_tokens == 7  # max_length stands for max_new_tokens
    assert decode_config(max_length=7, max_new_tokens=5).max_new_tokens == 5
    assert decode_config(eos_token_id=2).eos_token_id == (2,)
    with pytest.raises(GenerationError, match="beam_search"):
        decode_config(decode_strategy="beam_search")
    with pytest.raises(GenerationError, match="top_p=1.5"):
        decode_config(top_p=1.5)
    with pytest.raises(GenerationError, match=r"unknown generate arguments \['do_smaple'\]"):
        decode_config(do_smaple=True)
    with pytest.raises(GenerationError, match="single eos_token_id"):
        decode_config(min_new_tokens=2, eos_token_id=[1, 2])
    # NOTE: a served request follows vLLM instead: min_tokens holds back every id of the list
    served = Request((5,), 4, min_new_tokens=2).config(decode_config(eos_token_id=[1, 2]))
    assert served.min_new_tokens == 2 and served.eos_token_id == (1, 2)


def test_a_token_mask_leaves_only_its_tokens_to_choose_and_no_mask_changes_nothing():
    """token_masks.py's bit layout (bit t % 32 of word t // 32, the sign bit too) as choose applies it: a
    masked row picks the best of its allowed ids, greedy or sampled; an unconstrained row's numbers are
    the unmasked ones to the bit."""
    cfg = DecodeConfig(decode_strategy="sampling", temperature=0.7)
    logits = _logits(seed=9, batch=3)
    allowed = TM.unconstrained(3, VOCAB)
    ids = np.array([0, 5, 31, 32, 39])  # NOTE: 31 is word 0's sign bit
    allowed[0] = allowed[1] = TM.allowing(ids, VOCAB)
    assert list(TM.allowed_tokens(allowed[0], VOCAB)) == list(ids)
    params = rows_of(cfg, 3, VOCAB)._replace(sampling=np.array([False, True, True]), allowed=allowed)
    seen = jnp.zeros((3, VOCAB), bool)
    tokens, _ = L.choose(jnp.asarray(logits), params, seen, jnp.zeros(3, jnp.int32), _keys(1, 3), ())
    assert int(tokens[0]) == ids[np.argmax(logits[0, ids])]
    assert int(tokens[1]) in ids
    free = rows_of(cfg, 3, VOCAB)._replace(sampling=np.array([False, True, True]))
    both = L.processed(jnp.asarray(logits), params, seen, jnp.zeros(3, jnp.int32), ())
    plain = L.processed(jnp.asarray(logits), free, seen, jnp.zeros(3, jnp.int32), ())
    np.testing.assert_array_equal(np.asarray(both)[2], np.asarray(plain)[2])
    assert (np.asarray(both)[0, np.setdiff1d(np.arange(VOCAB), ids)] == np.finfo(np.float32).min).all()
