"""The GELU a half-precision program computes (gelu_by_erf, Paddle's own formula) against Paddle's
float32 kernel: forward and gradient, over the range where the erf form loses digits (x < -3)."""

import jax
import jax.numpy as jnp
import numpy as np
import paddle
import paddle.nn.functional as F

from paddle_xla.ops.activation import gelu_by_erf


def test_gelu_by_erf_matches_paddle():
    approximate = False  # NOTE: approximate=True is jax.nn.gelu's tanh form, as in the float32 lowering
    x = np.concatenate([np.linspace(-9, 9, 4001), np.random.default_rng(0).standard_normal(4000) * 3])
    x = x.astype("float32")
    xt = paddle.to_tensor(x, stop_gradient=False)
    want = F.gelu(xt, approximate=approximate)
    want.sum().backward()
    got = gelu_by_erf(jnp.asarray(x), approximate=approximate)
    grad = jax.grad(lambda v: gelu_by_erf(v, approximate=approximate).sum())(jnp.asarray(x))
    # NOTE: absolute, not relative: where GELU's output is tiny, 1 + erf(x / sqrt 2) cancels; below the
    # rounding a half-precision consumer applies to outputs of order 1e-3 and up.
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(np.asarray(grad), xt.grad.numpy(), rtol=1e-5, atol=2e-6)
