"""half_matmul (bf16 compute, float32 accumulation): value and both gradients equal a float32 matmul of
the same bf16-rounded operands and cotangent, for every layout Paddle's matmul takes."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from paddle_xla.lowering.half import half_matmul

CASES = [  # x shape, y shape, transpose_x, transpose_y
    ((2, 5, 6), (6, 7), False, False),  # weight matmul on [B, S, K]
    ((2, 5, 6), (7, 6), False, True),  # tied embedding head: h @ W^T
    ((5, 6), (6, 7), False, False),  # 2-D
    ((5, 6), (7, 6), False, True),
    ((6, 5), (6, 7), True, False),  # transpose_x falls back to the generic path
    ((2, 3, 5, 4), (2, 3, 6, 4), False, True),  # attention QK^T
    ((2, 3, 5, 6), (2, 3, 6, 4), False, False),  # attention PV
    ((2, 3, 6, 5), (2, 3, 6, 4), True, False),
    ((2, 3, 6, 5), (2, 3, 4, 6), True, True),
    ((2, 3, 5, 6), (6, 4), False, False),  # 4-D x 2-D
    ((3, 5, 6), (1, 6, 4), False, False),  # broadcast batch
    ((6,), (6, 4), False, False),  # vectors
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


def _dot_operand_dtypes(hlo: str) -> list[tuple[str, str]]:
    """The element types of every dot's two operands in compiled HLO text."""
    types, pairs = {}, []
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?%(\S+) = (\w+)\[", line)
        if m:
            types[m.group(1)] = m.group(2)
        d = re.search(r" dot\(%([^,]+), %([^)]+)\)", line)
        if d:
            pairs.append((types[d.group(1)], types[d.group(2)]))
    return pairs


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's layout rule")
def test_attention_dots_stay_half_after_head_transposes():
    """Attention's operands come from [B, S, H, D] -> [B, H, S, D] transposes. On XLA:CPU such a dot
    used to be upcast and run in float32; the forward's two dots must run in bf16, and the gradient
    program (whose dots contract over a middle axis, which XLA:CPU's bf16 path must not get: it
    fails at run time) must still compile and run."""
    b, s, h, d = 2, 16, 4, 8

    def heads(x):
        return jnp.transpose(x.reshape(b, s, h, d), (0, 2, 1, 3))

    def attention(q, k, v):
        p = jax.nn.softmax(half_matmul(heads(q), heads(k), transpose_y=True, cpu=True), axis=-1)
        return half_matmul(p, heads(v), cpu=True).sum()

    args = [jax.random.normal(jax.random.key(i), (b, s, h * d), jnp.float32) for i in range(3)]
    pairs = _dot_operand_dtypes(jax.jit(attention).lower(*args).compile().as_text())
    assert pairs == [("bf16", "bf16")] * 2, pairs
    grads = jax.jit(jax.grad(attention, argnums=(0, 1, 2)))(*args)
    assert all(bool(jnp.isfinite(g).all()) for g in grads)
