"""Weight-only int8 (Paddle's weight_quantize(algo="weight_only_int8") numerics) for inference programs.

A matmul weight [in, out] is held as int8 values and one scale per output channel: scale = max|w| / 127
over the column, q = round(w / scale) (half away from zero) clipped to [-127, 127], with the weight first
rounded to the compute dtype and the scale kept in it, as Paddle's CPU kernel computes them. The matmul
then multiplies by the int8 values (exact in bf16/fp16/fp32) and scales its output columns, which equals
x @ (q * scale) without materialising the dequantised weight in a separate pass.

Only weights whose every reader is a matmul taking them as its second operand, untransposed, are held so:
a runtime may change their representation because no other op sees them. Paddle-free."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..graph import Graph
from ..strategy import QUANT_TYPES  # noqa: F401  (the names a Strategy accepts)
from .layouts import matmul_weight_names


class Int8Weight(NamedTuple):
    q: jax.Array  # [in, out] int8
    scale: jax.Array  # [out], the compute dtype


# NOTE: so that a program taking Int8Weight leaves can be exported with jax.export (generator artifacts)
jax.export.register_namedtuple_serialization(Int8Weight, serialized_name="paddle_xla.lowering.int8.Int8Weight")


def quantize(w, dtype) -> Int8Weight:
    """Paddle's per-channel weight_only_int8 quantisation of a float [in, out] weight, in `dtype`."""
    xp = jnp if isinstance(w, jax.Array) else np
    held = xp.asarray(w).astype(dtype)
    scale = (xp.abs(held.astype(np.float32)).max(axis=0) / 127.0).astype(dtype)
    zero = scale.astype(np.float32) == 0
    x = held.astype(np.float32) / xp.where(zero, 1.0, scale.astype(np.float32))
    q = xp.clip(xp.sign(x) * xp.floor(xp.abs(x) + 0.5), -127, 127)
    # NOTE: an all-zero column has scale 0; Paddle's kernel divides by it and its clip turns the NaN into 127
    # (any value dequantises to 0 there; 127 keeps the bits Paddle's)
    return Int8Weight(xp.where(zero, 127, q).astype(np.int8), scale)


def int8_weight_names(graph: Graph) -> set[str]:
    """2-D float32 parameters read only as the untransposed second operand of pd_op.matmul."""
    return matmul_weight_names(graph)


def int8_matmul(x, w: Int8Weight, *, half=None, transpose_x=False, transpose_y=False):
    """x @ (w.q * w.scale): the products in the compute dtype, summed in float32, the columns scaled after."""
    dtype = half or jnp.float32
    out = lax.dot_general(
        x.astype(dtype), w.q.astype(dtype), (((x.ndim - 1,), (0,)), ((), ())), preferred_element_type=jnp.float32
    )
    return out * w.scale.astype(jnp.float32)
