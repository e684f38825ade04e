"""Order statistics along an axis: kthvalue, mode, median, nanmedian. Each also returns indices;
the gradient flows to the chosen elements through a gather, as Paddle's kernels scatter it."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .registry import lowering
from .util import axis_list


def _to_last(x, axes):
    """Move `axes` to the end and merge them into one axis."""
    rest = [a for a in range(x.ndim) if a not in axes]
    moved = jnp.transpose(x, rest + list(axes))
    return moved.reshape(moved.shape[: len(rest)] + (-1,))


def _keep(out, x_ndim, axes, keepdim):
    """Re-insert the reduced axes as size-1 dims when keepdim."""
    if not keepdim:
        return out
    for a in sorted(axes):
        out = jnp.expand_dims(out, a)
    return out


def _sorted_order(x):
    # NOTE: among equal values the lower index comes first. Paddle's CPU kernels pick among ties with
    # std::nth_element / partial_sort, whose order is unspecified, so the chosen index (and where
    # the gradient goes) may differ from Paddle's on ties; the values agree.
    return jnp.argsort(lax.stop_gradient(x), axis=-1, stable=True)


def _gather_last(x, idx):
    return jnp.take_along_axis(x, idx[..., None], axis=-1)[..., 0]


@lowering("pd_op.kthvalue")
def kthvalue(x, *, k, axis=-1, keepdim=False):
    axes = axis_list(axis, x.ndim) if x.ndim else ()
    if not axes:
        return x, jnp.zeros((), jnp.int64)
    xs = _to_last(x, axes)
    idx = _sorted_order(xs)[..., k - 1]
    out = _gather_last(xs, idx)
    return _keep(out, x.ndim, axes, keepdim), _keep(idx.astype(jnp.int64), x.ndim, axes, keepdim)


@lowering("pd_op.mode")
def mode(x, *, axis=-1, keepdim=False):
    # NOTE: the most frequent value; on a tie in counts the smallest value; its index is the last
    # place it occurs (Paddle's CPU kernel). Counting pairs costs n^2 per slice.
    axes = axis_list(axis, x.ndim) if x.ndim else ()
    if not axes:
        return x, jnp.zeros((), jnp.int64)
    xs = _to_last(x, axes)
    v = lax.stop_gradient(xs)
    counts = jnp.sum(v[..., :, None] == v[..., None, :], axis=-1)
    candidates = counts == jnp.max(counts, axis=-1, keepdims=True)
    value = jnp.min(jnp.where(candidates, v, jnp.max(v, axis=-1, keepdims=True)), axis=-1)
    hits = v == value[..., None]
    n = v.shape[-1]
    idx = n - 1 - jnp.argmax(hits[..., ::-1], axis=-1)
    out = _gather_last(xs, idx)
    return _keep(out, x.ndim, axes, keepdim), _keep(idx.astype(jnp.int64), x.ndim, axes, keepdim)


def _median(x, axis, keepdim, mode, ignore_nan):
    axes = axis_list(axis, x.ndim) if x.ndim else ()
    xs = _to_last(x, axes) if axes else x.reshape(1)
    order = _sorted_order(xs)
    nan = jnp.isnan(lax.stop_gradient(xs)) if jnp.issubdtype(xs.dtype, jnp.inexact) else None
    if ignore_nan:
        count = jnp.sum(~nan, axis=-1) if nan is not None else jnp.full(xs.shape[:-1], xs.shape[-1])
    else:
        count = jnp.full(xs.shape[:-1], xs.shape[-1])
    lo = jnp.maximum((count - 1) // 2, 0)
    hi = jnp.maximum(count // 2, 0) if mode == "avg" else lo
    i_lo, i_hi = _gather_last(order, lo), _gather_last(order, hi)
    if nan is not None and not ignore_nan:
        # NOTE: a slice holding a NaN has median NaN, indexed (and differentiated) at its first NaN.
        has_nan, first_nan = jnp.any(nan, axis=-1), jnp.argmax(nan, axis=-1)
        i_lo, i_hi = jnp.where(has_nan, first_nan, i_lo), jnp.where(has_nan, first_nan, i_hi)
    v_lo, v_hi = _gather_last(xs, i_lo), _gather_last(xs, i_hi)
    out = (v_lo + v_hi) / 2 if mode == "avg" else v_lo
    idx = jnp.stack([i_lo, i_hi], axis=-1) if mode == "avg" else i_lo
    if ignore_nan:
        # NOTE: an all-NaN slice gives NaN and index -1.
        out = jnp.where(count == 0, jnp.nan, out)
        idx = jnp.where((count == 0)[..., None] if mode == "avg" else count == 0, -1, idx)
    if not axes:
        # NOTE: a 0-d input: its value, indexed [0, 0] in "avg" mode and 0 in "min" mode, as Paddle's.
        out = out.reshape(())
    out = _keep(out, x.ndim, axes, keepdim)
    if mode != "avg":
        idx = _keep(idx, x.ndim, axes, keepdim)
    return out, idx.astype(jnp.int64)


@lowering("pd_op.median")
def median(x, *, axis, keepdim=False, mode="avg"):
    return _median(x, axis if axis else list(range(x.ndim)), keepdim, mode, False)


@lowering("pd_op.nanmedian")
def nanmedian(x, *, axis, keepdim=False, mode="avg"):
    return _median(x, axis if axis else list(range(x.ndim)), keepdim, mode, True)
