"""Reductions over axes: sum, mean, max, min, prod, all, any, logsumexp, argmax/argmin, and the
Frobenius / squared L2 norms (p_norm lives with the normalisations in norm.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import lowering
from .util import axis_list, dim_product, is_static
from .util import dtype as jax_dtype


def _axes(x, axis, reduce_all=False):
    """Paddle's axis (operand or attribute; empty means every axis) as a tuple."""
    if reduce_all or x.ndim == 0:
        return tuple(range(x.ndim))
    return axis_list(axis, x.ndim)


def _int_like(x) -> bool:
    return x.dtype == jnp.bool_ or jnp.issubdtype(x.dtype, jnp.integer)


def _lib(x):
    """NumPy for static integer input (shape arithmetic, e.g. the product of a shape, must stay
    static under jit), else jax.numpy. NOTE: never NumPy for floats: it would sum bfloat16 in
    bfloat16, where XLA accumulates in float32 as Paddle does."""
    return np if is_static(x) and _int_like(x) else jnp


@lowering("pd_op.sum", amp="black")
def sum_(x, axis, *, dtype=None, keepdim=False):
    dt = jax_dtype(dtype)
    if dt is None and _int_like(x) and x.dtype not in (jnp.int64, jnp.uint64):
        # NOTE: Paddle sums bool and narrower integers into int64.
        dt = jnp.int64
    return _lib(x).sum(x, axis=_axes(x, axis), dtype=dt, keepdims=keepdim)


@lowering("pd_op.mean", amp="black")
def mean(x, axis, *, keepdim=False):
    axes = _axes(x, axis)
    if _int_like(x):
        # NOTE: an integer mean stays integer, truncated like C++ division.
        n = dim_product([x.shape[a] for a in axes])
        total = jnp.sum(x, axis=axes, keepdims=keepdim, dtype=x.dtype)
        return lax.div(total, jnp.asarray(n, x.dtype))
    return jnp.mean(x, axis=axes, keepdims=keepdim)


@lowering("pd_op.mean_all", amp="black")
def mean_all(x):
    return jnp.mean(x)


# NOTE: max/min/amax/amin share the gradient evenly among tied maxima, in Paddle and in jnp alike.
@lowering("pd_op.max")
def max_(x, axis, *, keepdim=False):
    return _lib(x).max(x, axis=_axes(x, axis), keepdims=keepdim)


@lowering("pd_op.min")
def min_(x, axis, *, keepdim=False):
    return _lib(x).min(x, axis=_axes(x, axis), keepdims=keepdim)


@lowering("pd_op.amax")
def amax(x, *, axis, keepdim=False):
    return _lib(x).max(x, axis=_axes(x, axis), keepdims=keepdim)


@lowering("pd_op.amin")
def amin(x, *, axis, keepdim=False):
    return _lib(x).min(x, axis=_axes(x, axis), keepdims=keepdim)


@lowering("pd_op.prod", amp="black")
def prod(x, axis, *, keepdim=False, reduce_all=False):
    # NOTE: Paddle's prod keeps the input's dtype (int32 stays int32, wrapping on overflow); jnp and
    # NumPy would promote int32 to int64.
    dt = None if x.dtype == jnp.bool_ else x.dtype
    return _lib(x).prod(x, axis=_axes(x, axis, reduce_all), keepdims=keepdim, dtype=dt)


@lowering("pd_op.all")
def all_(x, *, axis, keepdim=False):
    return _lib(x).all(x, axis=_axes(x, axis), keepdims=keepdim)


@lowering("pd_op.any")
def any_(x, *, axis, keepdim=False):
    return _lib(x).any(x, axis=_axes(x, axis), keepdims=keepdim)


@lowering("pd_op.logsumexp", amp="black")
def logsumexp(x, *, axis, keepdim=False, reduce_all=False):
    return jax.nn.logsumexp(x, axis=_axes(x, axis, reduce_all), keepdims=keepdim)


def _arg(fn, x, axis, keepdims, flatten, dtype):
    dt = jax_dtype(dtype) or jnp.int64
    if flatten or x.ndim == 0:
        out = fn(x.reshape(-1))
        return out.astype(dt).reshape((1,) * x.ndim if keepdims else ())
    (a,) = axis_list(axis, x.ndim)
    return fn(x, axis=a, keepdims=keepdims).astype(dt)


@lowering("pd_op.argmax")
def argmax(x, axis, *, keepdims=False, flatten=False, dtype="int64"):
    return _arg(jnp.argmax, x, axis, keepdims, flatten, dtype)


@lowering("pd_op.argmin")
def argmin(x, axis, *, keepdims=False, flatten=False, dtype="int64"):
    return _arg(jnp.argmin, x, axis, keepdims, flatten, dtype)


# ---- norms -----------------------------------------------------------------------------------
def _l2(x, axes, keepdims):
    # NOTE: an all-zero slice gets gradient 0 (as in Paddle), not jnp.sqrt's NaN at 0.
    s = jnp.sum(jnp.square(x), axis=axes, keepdims=keepdims)
    nonzero = s > 0
    return jnp.where(nonzero, jnp.sqrt(jnp.where(nonzero, s, 1)), 0)


@lowering("pd_op.frobenius_norm", amp="black")
def frobenius_norm(x, axis, *, keep_dim=False, reduce_all=False):
    return _l2(x, _axes(x, axis, reduce_all), keep_dim)


@lowering("pd_op.squared_l2_norm")
def squared_l2_norm(x):
    return jnp.sum(jnp.square(x)).reshape((1,))


@lowering("pd_op.reduce_as")
def reduce_as(x, target):
    """Sum x down to target's shape (the reverse of broadcasting)."""
    lead = x.ndim - target.ndim
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(target.shape) if d == 1 and x.shape[lead + i] != 1)
    return jnp.sum(x, axis=axes).reshape(target.shape)


@lowering("pd_op.renorm")
def renorm(x, *, p, axis, max_norm):
    # NOTE: each slice along `axis` whose p-norm exceeds max_norm is scaled down to it (no epsilon).
    axis = axis % x.ndim
    others = tuple(a for a in range(x.ndim) if a != axis)
    norm = jnp.sum(jnp.abs(x) ** p, axis=others, keepdims=True) ** (1.0 / p)
    scale = jnp.where(norm > max_norm, max_norm / norm, jnp.ones_like(norm))
    return x * scale


@lowering("pd_op.clip_by_norm")
def clip_by_norm(x, *, max_norm):
    norm = jnp.sqrt(jnp.sum(jnp.square(x)))
    # NOTE: Paddle adds 1e-6 to the norm only when it is (about) zero.
    eps = jnp.where(norm <= 1e-30, jnp.asarray(1e-6, x.dtype), jnp.asarray(0, x.dtype))
    scale = jnp.where(norm <= max_norm, jnp.ones_like(norm), max_norm / (norm + eps))
    return x * scale
