"""ops/fixed_order.py: sums along the last axis that give a row the same bits whatever rows share the call,
and the generation pieces built on them (row_means.py's mean, the softmaxes of row_logits.py, a decode
step's score against its own key), against NumPy and across row counts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from paddle_xla.generation import row_logits as R
from paddle_xla.ops.fixed_order import fixed_sum, log_softmax, row_mean, softmax
from paddle_xla.ops.grouped_attention import grouped_scores

ROWS = (1, 2, 3, 5, 8, 17, 32)


def _each_row_alike(fn, x):
    """fn on the first r rows of x gives those rows the bits fn gives them among all of x's rows."""
    full = np.asarray(jax.jit(fn)(x))
    for r in ROWS:
        np.testing.assert_array_equal(np.asarray(jax.jit(fn)(x[:r])), full[:r], err_msg=f"{r} rows")
    return full


@pytest.mark.parametrize("width", [1, 7, 64, 768, 50257])
def test_a_rows_sum_is_the_same_bits_at_any_row_count_and_is_the_sum(width):
    x = np.random.default_rng(width).standard_normal((32, width)).astype(np.float32)
    total = _each_row_alike(fixed_sum, x)
    np.testing.assert_allclose(total, x.astype(np.float64).sum(-1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("vocab", [256, 50257])
def test_softmaxes_are_the_same_bits_at_any_row_count_and_are_softmaxes(vocab):
    x = 3 * np.random.default_rng(vocab).standard_normal((32, vocab)).astype(np.float32)
    np.testing.assert_allclose(_each_row_alike(log_softmax, x), jax.nn.log_softmax(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_each_row_alike(softmax, x), jax.nn.softmax(x), rtol=1e-5, atol=1e-7)


def test_row_mean_is_fixed_over_the_last_axis_and_pd_op_mean_otherwise():
    x = np.random.default_rng(0).standard_normal((32, 1, 768)).astype(np.float32)
    got = _each_row_alike(lambda v: row_mean(v, [-1], keepdim=True), x)
    assert got.shape == (32, 1, 1)
    np.testing.assert_allclose(got[..., 0], x.mean(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(row_mean(jnp.asarray(x), [2])), got[..., 0])  # NOTE: the same axis
    np.testing.assert_array_equal(np.asarray(row_mean(jnp.asarray(x), [0])), np.asarray(jnp.mean(x, axis=0)))
    half = np.asarray(row_mean(jnp.asarray(x, jnp.bfloat16), [-1]), np.float32)
    np.testing.assert_allclose(half, x.astype(jnp.bfloat16).astype(np.float32).mean(-1), rtol=1e-2)
    ints = np.arange(12, dtype=np.int64).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(row_mean(jnp.asarray(ints), [-1])), [1, 5, 9])


def test_a_decode_steps_scores_against_its_own_key_are_the_same_bits_at_any_row_count():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((32, 12, 1, 64)).astype(np.float32)
    cache, own = (rng.standard_normal((32, 4, s, 64)).astype(np.float32) for s in (16, 1))
    got = np.asarray(grouped_scores(jnp.asarray(q), jnp.asarray(cache), jnp.asarray(own)))
    for r in ROWS:
        np.testing.assert_array_equal(
            np.asarray(jax.jit(grouped_scores)(q[:r], cache[:r], own[:r])), got[:r], err_msg=f"{r} rows"
        )
    keys = np.concatenate([np.repeat(cache, 3, axis=1), np.repeat(own, 3, axis=1)], axis=2)
    np.testing.assert_allclose(got, q @ np.swapaxes(keys, -1, -2), rtol=1e-5, atol=1e-5)


def test_top_p_keeps_the_token_that_crosses_p_with_the_fixed_running_sum():
    probs = jnp.asarray([[0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4]], jnp.float32)
    kept = np.asarray(R.top_p_filter(probs, jnp.asarray([0.7, 0.5], jnp.float32)))
    np.testing.assert_array_equal(kept, np.float32([[0.5, 0.3, 0.0, 0.0], [0.0, 0.0, 0.3, 0.4]]))
