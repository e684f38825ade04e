"""Matrix products."""
from __future__ import annotations

import jax.numpy as jnp

from .registry import lowering


@lowering("pd_op.matmul")
def matmul(x, y, *, transpose_x=False, transpose_y=False):
    # NOTE: Paddle treats 1-D operands like NumPy's matmul does, after the optional transposes.
    if transpose_x and x.ndim >= 2:
        x = jnp.swapaxes(x, -1, -2)
    if transpose_y and y.ndim >= 2:
        y = jnp.swapaxes(y, -1, -2)
    return jnp.matmul(x, y)
