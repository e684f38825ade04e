"""Gathers and scatters: integer-array indexing in both directions, and selection by mask.

Negative indices count from the end, as Paddle's CPU kernels do (and jnp's indexing does)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .registry import lowering
from .util import is_static, static_scalar, xp


def _axis(axis, ndim):
    a = int(static_scalar(axis)) if not isinstance(axis, int) else axis
    return a % max(ndim, 1)


def _along(axis, index):
    """An index tuple that puts `index` at `axis` and takes everything elsewhere."""
    return (slice(None),) * axis + (index,)


# ---- reads ---------------------------------------------------------------------------------------
@lowering("pd_op.gather")
def gather(x, index, axis):
    if np.ndim(index) == 2 and np.shape(index)[1] == 1:
        index = xp(index).reshape(index, (-1,))  # NOTE: Paddle reads an [R, 1] index as [R] (restore_index)
    return xp(x, index).take(x, index, axis=_axis(axis, np.ndim(x)))


@lowering("pd_op.index_select")
def index_select(x, index, *, axis=0):
    return xp(x, index).take(x, index, axis=axis % max(np.ndim(x), 1))


def _nd_index(index):
    """gather_nd / scatter_nd index [..., k] as a tuple of k index arrays."""
    return tuple(index[..., i] for i in range(np.shape(index)[-1]))


@lowering("pd_op.gather_nd")
def gather_nd(x, index):
    if np.shape(index)[-1] == 0:
        # NOTE: an empty last index dimension selects the whole tensor for every index row.
        return xp(x).broadcast_to(x, np.shape(index)[:-1] + np.shape(x))
    # NOTE: a constant x (NumPy) cannot be indexed by traced indices; lift it to jax first.
    return (x if xp(x, index) is np else jnp.asarray(x))[_nd_index(index)]


@lowering("pd_op.nonzero")
def nonzero(condition):
    # NOTE: only a constant condition (x[mask] with a constant mask) has a shape known before running;
    # masked_select has no lowering at all, so it is reported before compiling.
    if not is_static(condition):
        raise ValueError(
            "nonzero (x[bool_mask], paddle.nonzero) has a data-dependent shape; XLA needs "
            "static shapes. Use paddle.where(mask, x, fill) or x * mask instead"
        )
    return np.argwhere(np.asarray(condition)).astype(np.int64)


@lowering("pd_op.shard_index")
def shard_index(x, *, index_num, nshards, shard_id, ignore_value=-1):
    shard_size = (index_num + nshards - 1) // nshards
    m = xp(x)
    return m.where(x // shard_size == shard_id, x % shard_size, m.asarray(ignore_value, dtype=x.dtype))


@lowering("pd_op.index_sample")
def index_sample(x, index):
    return jnp.take_along_axis(x, index, axis=1)


@lowering("pd_op.take_along_axis")
def take_along_axis(arr, indices, *, axis):
    return jnp.take_along_axis(arr, indices, axis=axis % np.ndim(arr))


# ---- writes --------------------------------------------------------------------------------------
@lowering("pd_op.scatter", "pd_op.scatter_")
def scatter(x, index, updates, *, overwrite=True):
    index = jnp.reshape(index, (-1,)) if np.ndim(index) else index
    x = jnp.asarray(x)
    if overwrite:
        return x.at[index].set(updates)
    # NOTE: without overwrite Paddle zeroes the indexed rows, then sums every update into them.
    return x.at[index].set(0).at[index].add(updates)


@lowering("pd_op.scatter_nd_add")
def scatter_nd_add(x, index, updates):
    x = jnp.asarray(x)
    if np.shape(index)[-1] == 0:
        return x + jnp.sum(jnp.reshape(updates, (-1,) + np.shape(x)), axis=0)
    return x.at[_nd_index(index)].add(updates)


@lowering("pd_op.index_add", "pd_op.index_add_")
def index_add(x, index, add_value, *, axis=0):
    return jnp.asarray(x).at[_along(axis % np.ndim(x), index)].add(add_value)


@lowering("pd_op.where", "pd_op.where_")
def where(condition, x, y):
    return xp(condition, x, y).where(condition, x, y)


@lowering("pd_op.masked_fill", "pd_op.masked_fill_")
def masked_fill(x, mask, value):
    # NOTE: Paddle's masked_fill_grad gives the fill value no gradient (it writes an integer count
    # into it); training parity with Paddle means none here either.
    value = jax.lax.stop_gradient(jnp.asarray(value, dtype=x.dtype))
    if value.size == 1:
        value = value.reshape(())
    return jnp.where(mask, value, x)


# ---- put_along_axis -----------------------------------------------------------------------------
def _full_index(indices, axis):
    """put_along_axis's index tuple: `indices` at `axis`, the position itself elsewhere."""
    shape = np.shape(indices)
    grids = np.indices(shape, sparse=True)
    return tuple(indices if d == axis else grids[d] for d in range(len(shape)))


def _identity(reduce, dtype):
    if reduce in ("add", "mean"):
        return 0
    if reduce in ("mul", "multiply"):
        return 1
    big = jnp.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).max
    return -big if reduce == "amax" else big


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _put_mul(arr, indices, values, axis, include_self):
    idx = _full_index(indices, axis)
    base = arr if include_self else arr.at[idx].set(1)
    return base.at[idx].multiply(values)


def _put_mul_fwd(arr, indices, values, axis, include_self):
    out = _put_mul(arr, indices, values, axis, include_self)
    return out, (arr, indices, values, out)


def _put_mul_bwd(axis, include_self, res, g):
    # NOTE: JAX has no gradient for a scatter-multiply with repeated indices. Paddle's rule is the
    # product rule written as out / factor, for the tensor and for every value alike.
    arr, indices, values, out = res
    idx = _full_index(indices, axis)
    touched = jnp.zeros(arr.shape, bool).at[idx].set(True)
    g_arr = jnp.where(touched, g * out / arr if include_self else jnp.zeros((), g.dtype), g)
    return g_arr, None, g[idx] * out[idx] / values


_put_mul.defvjp(_put_mul_fwd, _put_mul_bwd)


@lowering("pd_op.put_along_axis", "pd_op.put_along_axis_")
def put_along_axis(arr, indices, values, *, axis, reduce="assign", include_self=True):
    arr = jnp.asarray(arr)
    idx = _full_index(indices, axis % arr.ndim)
    values = jnp.broadcast_to(jnp.asarray(values, dtype=arr.dtype), np.shape(indices))
    if reduce == "assign":
        return arr.at[idx].set(values)
    base = arr if include_self else arr.at[idx].set(_identity(reduce, arr.dtype))
    at = base.at[idx]
    if reduce == "add":
        return at.add(values)
    if reduce in ("mul", "multiply"):
        return _put_mul(arr, indices, values, axis % arr.ndim, include_self)
    if reduce == "amax":
        return at.max(values)
    if reduce == "amin":
        return at.min(values)
    if reduce == "mean":
        touched = jnp.zeros(arr.shape, bool).at[idx].set(True)
        count = jnp.zeros(arr.shape, arr.dtype).at[idx].add(1) + (1 if include_self else 0)
        # NOTE: untouched positions divide by 1, not 0, so no NaN leaks into the gradient.
        count = jnp.where(touched, count, 1)
        total = at.add(values)
        mean = total / count if jnp.issubdtype(arr.dtype, jnp.inexact) else total // count
        return jnp.where(touched, mean, arr)
    raise ValueError(f"put_along_axis reduce={reduce!r} is not assign, add, mul, mean, amax or amin")


# ---- index_put (x[idx] = v with tensor indices) ----------------------------------------------
def _mask_put(x, mask, value, accumulate):
    """x[mask] = value with a static shape: the k-th True position takes the k-th value row."""
    trailing = x.shape[mask.ndim :]
    value = jnp.asarray(value, dtype=x.dtype)
    rowwise = value.ndim == len(trailing) + 1 and value.shape[0] != 1
    if rowwise:
        # NOTE: the number of True values is fixed by value's (static) first dimension.
        order = jnp.clip(jnp.cumsum(mask.reshape(-1)) - 1, 0, value.shape[0] - 1)
        value = jnp.take(value, order, axis=0).reshape(x.shape)
    else:
        # NOTE: otherwise one value row serves every True position; a leading 1 is that row.
        if value.ndim > len(trailing):
            value = value.reshape(value.shape[value.ndim - len(trailing) :])
        value = jnp.broadcast_to(value, x.shape)
    mask = mask.reshape(mask.shape + (1,) * len(trailing))
    if accumulate:
        return x + jnp.where(mask, value, jnp.zeros((), x.dtype))
    return jnp.where(mask, value, x)


@lowering("pd_op.index_put", "pd_op.index_put_")
def index_put(x, indices, value, *, accumulate=False):
    x = jnp.asarray(x)
    masks = [i for i in indices if jnp.asarray(i).dtype == jnp.bool_]
    if masks:
        if len(indices) != 1:
            raise ValueError("index_put mixing a boolean mask with other indices is not supported")
        return _mask_put(x, jnp.asarray(masks[0]), value, accumulate)
    idx = tuple(indices)
    value = jnp.asarray(value, dtype=x.dtype)
    return x.at[idx].add(value) if accumulate else x.at[idx].set(value)
