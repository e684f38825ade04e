"""Ordering: topk, argsort (also paddle.sort), searchsorted, and one_hot."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import lowering
from .util import static_scalar


@lowering("pd_op.topk")
def topk(x, k, *, axis=-1, largest=True, sorted=True):
    """The k largest (smallest) values and their indices, always sorted.

    Known difference: among equal values paddle_xla takes the lowest indices first. Paddle's CPU
    kernel leaves ties in the order std::nth_element or std::partial_sort happens to (topk(k=2) of
    [1, 2, 2, 2, 1]: Paddle [1, 3], here [1, 2]), and with sorted=False in that order too; the
    values agree. Emulating libstdc++'s introselect is not cheap on XLA.
    """
    k = int(static_scalar(k))
    if np.ndim(x) == 0:
        return x, jnp.zeros((), jnp.int64)
    moved = jnp.moveaxis(x, axis, -1)
    if largest:
        # NOTE: lax.top_k ranks NaN highest, as Paddle's CPU kernel does; ties by lower index first.
        _, idx = lax.top_k(moved, k)
    else:
        idx = jnp.argsort(moved, axis=-1, stable=True)[..., :k]
    # NOTE: values are re-read from x so they stay exact (no negation round trip) for every dtype.
    values = jnp.take_along_axis(moved, idx, axis=-1)
    return jnp.moveaxis(values, -1, axis), jnp.moveaxis(idx.astype(jnp.int64), -1, axis)


@lowering("pd_op.argsort")
def argsort(x, *, axis=-1, descending=False, stable=False):
    if np.ndim(x) == 0:
        return x, jnp.zeros((), jnp.int64)
    # NOTE: always stable: Paddle's unstable sort has no fixed tie order to match, and stable
    # descending keeps equal keys in input order, as Paddle's stable mode does (NaN sorts as largest).
    idx = jnp.argsort(x, axis=axis, stable=True, descending=descending)
    return jnp.take_along_axis(x, idx, axis=axis), idx.astype(jnp.int64)


@lowering("pd_op.searchsorted")
def searchsorted(sorted_sequence, values, *, out_int32=False, right=False):
    side = "right" if right else "left"
    out_dt = jnp.int32 if out_int32 else jnp.int64

    def search(seq, vals):
        return jnp.searchsorted(seq, vals, side=side)

    if np.ndim(sorted_sequence) == 1:
        out = search(sorted_sequence, values)
    else:
        # NOTE: an N-D sequence searches its last axis, row by row against the matching values row.
        batch = np.shape(sorted_sequence)[:-1]
        seq = jnp.reshape(sorted_sequence, (-1, np.shape(sorted_sequence)[-1]))
        vals = jnp.reshape(values, (seq.shape[0], -1))
        out = jax.vmap(search)(seq, vals).reshape(batch + np.shape(values)[-1:])
    return out.astype(out_dt)


@lowering("pd_op.one_hot")
def one_hot(x, num_classes):
    n = int(static_scalar(num_classes))
    return jax.nn.one_hot(x, n, dtype=jnp.float32)
