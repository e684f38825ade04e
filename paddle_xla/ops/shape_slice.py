"""Basic indexing: `x[1:3, ::2]` reads (slice, strided_slice) and `x[1:3] = v` writes (set_value).

Reads of constants stay NumPy (`paddle.shape(x)[0]` is shape arithmetic)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .registry import lowering
from .util import static_ints, xp


def _index(ndim, axes, slices) -> tuple:
    idx = [slice(None)] * ndim
    for a, s in zip(axes, slices):
        idx[a % ndim] = s
    return tuple(idx)


def _drop_axes(x, axes):
    shape = np.shape(x)
    drop = {a % len(shape) for a in axes}
    return xp(x).reshape(x, tuple(d for i, d in enumerate(shape) if i not in drop))


@lowering("pd_op.slice")
def slice_(x, starts, ends, *, axes, infer_flags=(), decrease_axis=()):
    # NOTE: with step 1 Paddle clamps negative and out-of-range bounds exactly like Python slices.
    slices = [slice(s, e) for s, e in zip(static_ints(starts), static_ints(ends))]
    out = x[_index(np.ndim(x), axes, slices)]
    return _drop_axes(out, decrease_axis) if len(decrease_axis) else out


@lowering("pd_op.strided_slice")
def strided_slice(x, starts, ends, strides, *, axes):
    # NOTE: checked against Paddle over a grid of bounds and strides: Python slice semantics.
    slices = [slice(s, e, st) for s, e, st in
              zip(static_ints(starts), static_ints(ends), static_ints(strides))]
    return x[_index(np.ndim(x), axes, slices)]


@lowering("pd_op.crop")
def crop(x, shape, offsets):
    offs = static_ints(offsets) or [0] * np.ndim(x)
    sizes = static_ints(shape)
    slices = [slice(o, np.shape(x)[i] if n == -1 else o + n)
              for i, (o, n) in enumerate(zip(offs, sizes))]
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
    starts, ends, steps = static_ints(starts), static_ints(ends), static_ints(steps)
    shape = np.shape(x)
    # NOTE: checked against Paddle's kernel: set_value's bounds follow Python slices too.
    idx = _index(len(shape), axes, [slice(s, e, st) for s, e, st in zip(starts, ends, steps)])
    slice_shape = np.empty(shape, dtype=np.bool_)[idx].shape
    m = xp(x, value)
    value = _fit(m.asarray(value).astype(x.dtype), _value_layout(slice_shape, decrease_axes, none_axes),
                 slice_shape, m)
    if m is np:
        out = np.array(x)
        out[idx] = value
        return out
    return jnp.asarray(x).at[idx].set(value)


@lowering("pd_op.set_value", "pd_op.set_value_")
def set_value(x, starts, ends, steps, *, axes, decrease_axes, none_axes, shape, values):
    value = np.asarray(values).reshape(tuple(shape))
    return set_slices(x, value, starts, ends, steps, axes, decrease_axes, none_axes)


@lowering("pd_op.set_value_with_tensor", "pd_op.set_value_with_tensor_")
def set_value_with_tensor(x, values, starts, ends, steps, *, axes, decrease_axes, none_axes):
    return set_slices(x, values, starts, ends, steps, axes, decrease_axes, none_axes)
