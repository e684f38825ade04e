"""half_matmul (bf16 compute, float32 accumulation): value and both gradients equal a float32 matmul of
the same bf16-rounded operands and cotangent, for every layout Paddle's matmul takes."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from paddle_xla.train.precision import half_matmul

CASES = [  # x shape, y shape, transpose_x, transpose_y
    ((2, 5, 6), (6, 7), False, False),        # weight matmul on [B, S, K]
    ((2, 5, 6), (7, 6), False, True),         # tied embedding head: h @ W^T
    ((5, 6), (6, 7), False, False),           # 2-D
    ((5, 6), (7, 6), False, True),
    ((6, 5), (6, 7), True, False),            # transpose_x falls back to the generic path
    ((2, 3, 5, 4), (2, 3, 6, 4), False, True),  # attention QK^T
    ((2, 3, 5, 6), (2, 3, 6, 4), False, False),  # attention PV
    ((2, 3, 6, 5), (2, 3, 6, 4), True, False),
    ((2, 3, 6, 5), (2, 3, 4, 6), True, True),
    ((2, 3, 5, 6), (6, 4), False, False),     # 4-D x 2-D
    ((3, 5, 6), (1, 6, 4), False, False),     # broadcast batch
    ((6,), (6, 4), False, False),             # vectors
    ((2, 5, 6), (6,), False, False),
]


def _round(x):
    return x.astype(jnp.bfloat16).astype(jnp.float32)


@pytest.mark.parametrize("xs, ys, tx, ty", CASES)
def test_half_matmul_value_and_grads(xs, ys, tx, ty):
    kx, ky, kc = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, xs, jnp.float32)
    y = jax.random.normal(ky, ys, jnp.float32)

    def ref(x, y):
        a = jnp.swapaxes(x, -1, -2) if tx and x.ndim > 1 else x
        b = jnp.swapaxes(y, -1, -2) if ty and y.ndim > 1 else y
        return jnp.matmul(_round(a), _round(b), precision="highest")

    got, got_vjp = jax.vjp(lambda x, y: half_matmul(x, y, transpose_x=tx, transpose_y=ty), x, y)
    want, want_vjp = jax.vjp(ref, x, y)
    assert got.dtype == jnp.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    ct = _round(jax.random.normal(kc, want.shape, jnp.float32))
    # NOTE: the reference's gradient passes through _round's cast (identity in float32), so it is
    # ct @ rounded operand in float32; half_matmul's is rounded to bf16 once more at the end.
    for g, w in zip(got_vjp(ct), want_vjp(ct)):
        assert g.dtype == jnp.float32
        np.testing.assert_allclose(g, _round(w), rtol=1e-2, atol=1e-2)
