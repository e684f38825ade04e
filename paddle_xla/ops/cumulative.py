"""Running reductions along an axis: cumsum, cumprod, logcumsumexp, cummax, cummin."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .registry import lowering
from .util import dtype as jax_dtype
from .util import static_scalar


def _scan(fn, x, axis, flatten, exclusive, reverse, identity):
    """Run `fn(x, axis, reverse)` the Paddle way: optionally flattened, exclusive (shifted by one,
    starting from `identity`) and/or from the end."""
    if x.ndim == 0 and not flatten:
        # NOTE: Paddle returns a 0-d input as it is, shape () and value, even when exclusive; only a
        # flattened scan makes it (1,).
        return x
    if flatten:
        x = x.reshape(-1)
        axis = 0
    axis = axis % x.ndim
    out = fn(x, axis, reverse)
    if exclusive:
        n = x.shape[axis]
        pad = jnp.full_like(lax.slice_in_dim(out, 0, 1, axis=axis), identity)
        if reverse:
            out = jnp.concatenate([lax.slice_in_dim(out, 1, n, axis=axis), pad], axis=axis)
        else:
            out = jnp.concatenate([pad, lax.slice_in_dim(out, 0, n - 1, axis=axis)], axis=axis)
    return out


def _cumsum(x, axis, reverse):
    return lax.cumsum(x, axis=axis, reverse=reverse)


def _cumprod(x, axis, reverse):
    return lax.cumprod(x, axis=axis, reverse=reverse)


def _cumlogsumexp(x, axis, reverse):
    return lax.cumlogsumexp(x, axis=axis, reverse=reverse)


@lowering("pd_op.cumsum", amp="black")
def cumsum(x, axis, *, flatten=False, exclusive=False, reverse=False):
    return _scan(_cumsum, x, int(static_scalar(axis)), flatten, exclusive, reverse, 0)


@lowering("pd_op.cumprod", amp="black")
def cumprod(x, *, dim, exclusive=False, reverse=False):
    return _scan(_cumprod, x, dim, False, exclusive, reverse, 1)


@lowering("pd_op.logcumsumexp")
def logcumsumexp(x, *, axis, flatten=False, exclusive=False, reverse=False):
    # NOTE: an exclusive scan starts from the dtype's lowest finite value, not -inf (as Paddle's).
    return _scan(_cumlogsumexp, x, axis, flatten, exclusive, reverse, jnp.finfo(x.dtype).min)


def _cum_extreme(x, axis, dtype, better):
    """Running max/min and the index where it was last reached (Paddle keeps the latest index on
    ties). The gradient flows to that index, through a gather."""
    if x.size == 0:
        return x, jnp.zeros(x.shape, jax_dtype(dtype) or jnp.int64)
    if x.ndim == 0:
        x = x.reshape(1)
        squeeze = True
    else:
        squeeze = False
    axis = axis % x.ndim
    xm = jnp.moveaxis(x, axis, 0)
    idx0 = jnp.zeros(xm.shape[1:], jnp.int64)

    def step(carry, item):
        best, best_i = carry
        v, i = item
        take = better(v, best) | (v == best)
        if jnp.issubdtype(x.dtype, jnp.inexact):
            # NOTE: a NaN always wins (so the latest NaN's index is kept), and nothing beats a NaN.
            take = jnp.isnan(v) | (take & ~jnp.isnan(best))
        best_i = jnp.where(take, i, best_i)
        best = jnp.where(take, v, best)
        return (best, best_i), best_i

    stopped = lax.stop_gradient(xm)
    first = (stopped[0], idx0)
    _, ids = lax.scan(step, first, (stopped, jnp.arange(xm.shape[0], dtype=jnp.int64)))
    values = jnp.take_along_axis(xm, ids, axis=0)
    values, ids = jnp.moveaxis(values, 0, axis), jnp.moveaxis(ids, 0, axis)
    if squeeze:
        values, ids = values.reshape(()), ids.reshape(())
    return values, ids.astype(jax_dtype(dtype) or jnp.int64)


@lowering("pd_op.cummax")
def cummax(x, *, axis, dtype="int64"):
    return _cum_extreme(x, axis, dtype, lambda v, best: v > best)


@lowering("pd_op.cummin")
def cummin(x, *, axis, dtype="int64"):
    return _cum_extreme(x, axis, dtype, lambda v, best: v < best)
