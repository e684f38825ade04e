"""Basic indexing: `x[1:3, ::2]` reads (slice, strided_slice) and `x[1:3] = v` writes (set_value).

Reads of constants stay NumPy (`paddle.shape(x)[0]` is shape arithmetic)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import lowering
from .util import is_static, static_ints, xp


def _index(ndim, axes, slices) -> tuple:
    idx = [slice(None)] * ndim
    for a, s in zip(axes, slices):
        idx[a % ndim] = s
    return tuple(idx)


def _drop_axes(x, axes):
    shape = np.shape(x)
    drop = {a % len(shape) for a in axes}
    return xp(x).reshape(x, tuple(d for i, d in enumerate(shape) if i not in drop))


def _positions(shape, starts, ends, steps, axes, decrease):
    """The slices an op names, and {axis: start} for 1-wide slices placed by a computed index.

    `x[i]` with a tensor i arrives with starts/ends computed from the inputs; the slice is still
    one wide (its axis is decreased), so its shape is static and only its position is traced."""
    ndim = len(shape)
    steps = static_ints(steps) if steps is not None else [1] * len(axes)
    if is_static(starts, ends):
        # NOTE: checked against Paddle over a grid of bounds and steps: Python slice semantics.
        slices = [slice(s, e, st) for s, e, st in zip(static_ints(starts), static_ints(ends), steps)]
        return _index(ndim, axes, slices), {}
    starts = jnp.reshape(jnp.asarray(starts), (-1,))
    dynamic = {}
    for k, a in enumerate(axes):
        if a % ndim not in {d % ndim for d in decrease} or steps[k] != 1:
            raise ValueError(
                "slice bounds computed from the inputs give a data-dependent shape; only a "
                "single index (x[i] with a tensor i) may be computed, not a range"
            )
        dim = shape[a % ndim]
        dynamic[a % ndim] = jnp.where(starts[k] < 0, starts[k] + dim, starts[k])
    return (slice(None),) * ndim, dynamic


@lowering("pd_op.slice")
def slice_(x, starts, ends, *, axes, infer_flags=(), decrease_axis=()):
    idx, dynamic = _positions(np.shape(x), starts, ends, None, axes, decrease_axis)
    out = x[idx]
    for axis, start in dynamic.items():
        out = lax.dynamic_slice_in_dim(out, start, 1, axis)
    return _drop_axes(out, decrease_axis) if len(decrease_axis) else out


@lowering("pd_op.strided_slice")
def strided_slice(x, starts, ends, strides, *, axes):
    # NOTE: checked against Paddle over a grid of bounds and strides: Python slice semantics.
    slices = [slice(s, e, st) for s, e, st in zip(static_ints(starts), static_ints(ends), static_ints(strides))]
    return x[_index(np.ndim(x), axes, slices)]


@lowering("pd_op.crop")
def crop(x, shape, offsets):
    offs = static_ints(offsets) or [0] * np.ndim(x)
    sizes = static_ints(shape)
    slices = [slice(o, np.shape(x)[i] if n == -1 else o + n) for i, (o, n) in enumerate(zip(offs, sizes))]
    return x[_index(np.ndim(x), range(len(slices)), slices)]


# ---- writes ---------------------------------------------------------------------------------------
def _value_layout(slice_shape, decrease_axes, none_axes):
    """The shape the value broadcasts against: slice dims less decreased axes, plus None axes."""
    decrease, nones = set(decrease_axes), sorted(none_axes)
    out, k = [], 0
    for i, d in enumerate(slice_shape):
        while k < len(nones) and nones[k] <= i:
            out.append(1)
            k += 1
        if i not in decrease:
            out.append(d)
    return tuple(out) + (1,) * (len(nones) - k)


def _fit(value, layout, slice_shape, m):
    # NOTE: Paddle hands a single value as shape [1] even when the target slice is 0-D.
    while np.ndim(value) > len(layout) and np.shape(value)[0] == 1:
        value = m.reshape(value, np.shape(value)[1:])
    return m.reshape(m.broadcast_to(value, layout), slice_shape)


def set_slices(x, value, starts, ends, steps, axes, decrease_axes, none_axes):
    shape = np.shape(x)
    idx, dynamic = _positions(shape, starts, ends, steps, axes, decrease_axes)
    slice_shape = tuple(1 if i in dynamic else d for i, d in enumerate(np.empty(shape, dtype=np.bool_)[idx].shape))
    m = xp(x, value) if not dynamic else jnp
    value = _fit(m.asarray(value).astype(x.dtype), _value_layout(slice_shape, decrease_axes, none_axes), slice_shape, m)
    if m is np:
        out = np.array(x)
        out[idx] = value
        return out
    if dynamic:
        # NOTE: a computed index: write the one-wide slab at its traced position.
        start = [dynamic.get(i, 0) for i in range(len(shape))]
        value = lax.dynamic_update_slice(jnp.asarray(x)[idx], value, start)
    return jnp.asarray(x).at[idx].set(value)


@lowering("pd_op.set_value", "pd_op.set_value_")
def set_value(x, starts, ends, steps, *, axes, decrease_axes, none_axes, shape, values):
    value = np.asarray(values).reshape(tuple(shape))
    return set_slices(x, value, starts, ends, steps, axes, decrease_axes, none_axes)


@lowering("pd_op.set_value_with_tensor", "pd_op.set_value_with_tensor_")
def set_value_with_tensor(x, values, starts, ends, steps, *, axes, decrease_axes, none_axes):
    return set_slices(x, values, starts, ends, steps, axes, decrease_axes, none_axes)
