"""half_pointwise_conv (a 1x1 convolution as a bf16 GEMM over the pixels): value and both gradients
equal a float32 convolution of the same bf16-rounded operands, in both data formats and with a stride."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from paddle_xla.lowering.half import half_pointwise_conv
from paddle_xla.ops.conv import is_pointwise_conv


def _round(x):
    return x.astype(jnp.bfloat16).astype(jnp.float32)


@pytest.mark.parametrize("data_format, stride", [("NCHW", 1), ("NCHW", 2), ("NHWC", 1), ("NHWC", 2)])
def test_half_pointwise_conv_value_and_grads(data_format, stride):
    kx, kw, kc = jax.random.split(jax.random.key(0), 3)
    shape = (2, 6, 7, 5) if data_format == "NCHW" else (2, 7, 5, 6)
    x = jax.random.normal(kx, shape, jnp.float32)
    w = jax.random.normal(kw, (4, 6, 1, 1), jnp.float32)  # OIHW, as Paddle holds it

    def ref(x, w):
        return lax.conv_general_dilated(
            _round(x),
            _round(w),
            (stride, stride),
            "VALID",
            precision="highest",
            dimension_numbers=(data_format, "OIHW", data_format),
        )

    got, got_vjp = jax.vjp(
        lambda x, w: half_pointwise_conv(x, w, half=jnp.bfloat16, data_format=data_format, strides=(stride, stride)),
        x,
        w,
    )
    want, want_vjp = jax.vjp(ref, x, w)
    assert got.dtype == jnp.bfloat16 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(jnp.float32), _round(want), rtol=1e-2, atol=1e-2)
    ct = _round(jax.random.normal(kc, want.shape, jnp.float32))
    for g, r in zip(got_vjp(ct.astype(jnp.bfloat16)), want_vjp(ct)):
        assert g.dtype == jnp.float32
        np.testing.assert_allclose(g, _round(r), rtol=1e-2, atol=1e-2)


def test_only_one_group_unpadded_1x1_filters_are_pointwise():
    w1, w3 = jnp.zeros((4, 6, 1, 1)), jnp.zeros((4, 6, 3, 3))
    assert is_pointwise_conv(w1, paddings=[0, 0])
    assert is_pointwise_conv(w1, paddings=[1, 1], padding_algorithm="VALID")
    assert not is_pointwise_conv(w1, paddings=[1, 1])
    assert not is_pointwise_conv(w3, paddings=[0, 0])
    assert not is_pointwise_conv(jnp.zeros((4, 3, 1, 1)), paddings=[0, 0], groups=2)
