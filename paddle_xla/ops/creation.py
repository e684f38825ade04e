"""Constants, shapes and PIR's builtin plumbing ops.

Shape-like results stay NumPy, so later shape arithmetic is static under jit."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import lowering
from .util import dims_array, is_static, is_symbol, static_ints, static_scalar, xp, xp_for_shape
from .util import dtype as jax_dtype


def _np_dtype(name):
    return np.dtype(jax_dtype(name)) if name not in (None, "") else None


@lowering("builtin.combine")
def combine(*xs):
    return list(xs)


@lowering("builtin.split")
def builtin_split(xs):
    return tuple(xs)


@lowering("builtin.slice", ignore=())
def builtin_slice(xs, *, index):
    return xs[index]


@lowering("pd_op.full")
def full(*, shape, value, dtype):
    # NOTE: NumPy, not jnp: a constant stays static, and XLA folds it in anyway.
    return np.full(tuple(shape), value, dtype=_np_dtype(dtype))


@lowering("pd_op.full_int_array")
def full_int_array(*, value, dtype):
    return np.asarray(value, dtype=_np_dtype(dtype))


@lowering("pd_op.assign_value_")
def assign_value(*maybe_out, shape, dtype, values):
    return np.asarray(values, dtype=_np_dtype(dtype)).reshape(tuple(shape))


@lowering("pd_op.shape64")
def shape64(x):
    return dims_array(np.shape(x), np.int64)


@lowering("pd_op.shape")
def shape(x):
    # NOTE: the older op gives int32, as Paddle's kernel does; shape64 is what Paddle 3 emits.
    return dims_array(np.shape(x), np.int32)


@lowering("pd_op.full_like")
def full_like(x, value, *, dtype):
    dt = jax_dtype(dtype) or x.dtype
    v = static_scalar(value) if is_static(value) else jnp.reshape(value, ())
    return xp(x, v).full(np.shape(x), v, dtype=dt)


@lowering("pd_op.full_with_tensor")
def full_with_tensor(value, shape, *, dtype):
    return jnp.full(tuple(static_ints(shape)), jnp.reshape(value, ()), dtype=jax_dtype(dtype))


@lowering("pd_op.empty")
def empty(shape, *, dtype):
    # NOTE: Paddle leaves the memory uninitialised; zeros are one of the values it may hold (and the same
    # on every run). A constant, so that shape arithmetic on it stays static.
    dims = tuple(static_ints(shape))
    return xp_for_shape(dims).zeros(dims, dtype=_np_dtype(dtype))


@lowering("pd_op.arange")
def arange(start, end, step, *, dtype):
    if is_static(start, end, step):
        bounds = [static_scalar(v) for v in (start, end, step)]
        if any(is_symbol(b) for b in bounds):
            return _symbolic_arange(bounds, _np_dtype(dtype))
        return np.arange(*bounds, dtype=_np_dtype(dtype))
    raise ValueError(
        "paddle.arange with bounds computed from input values gives a data-dependent shape; "
        "XLA needs static shapes. Use bounds from .shape or constants."
    )


def _symbolic_arange(bounds, dtype):
    """paddle.arange(ids.shape[1]) exported with a free sequence length. The length is a symbol only
    for whole-number bounds (a float start or step would need a symbolic ceil)."""
    if any(not is_symbol(b) and float(b) != int(b) for b in bounds):
        raise ValueError(
            f"paddle.arange{tuple(bounds)} with a symbolic bound and a fractional start or step has no symbolic length"
        )
    ints = [b if is_symbol(b) else int(b) for b in bounds]
    return jnp.arange(*ints).astype(dtype)


@lowering("pd_op.share_data", layout="unary", inplace=True)
def share_data(x):
    # NOTE: Tensor.detach() in a static program: the same values, and no gradient through them
    return lax.stop_gradient(x)


@lowering("pd_op.assign", layout="unary")
@lowering("pd_op.assign_out_")
def assign(x, *out):
    return x
