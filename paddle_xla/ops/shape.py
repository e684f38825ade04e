"""Reshaping, permuting, joining and splitting tensors.

Every lowering here picks NumPy or jax.numpy by its inputs (`xp`): shape arithmetic
(`shape64 -> slice -> stack -> reshape`) must stay NumPy so jit sees constants, not tracers."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .registry import lowering
from .util import axis_list, dim_product, static_ints, static_scalar, xp, xp_for_shape


def _axis(axis, ndim: int) -> int:
    """A Scalar axis operand (or int attribute) as a non-negative int."""
    a = int(static_scalar(axis)) if not isinstance(axis, int) else axis
    return a + ndim if a < 0 else a


# ---- reshape and friends ----------------------------------------------------------------------
def reshape_target(in_shape, shape) -> tuple[int, ...]:
    """Paddle's reshape rule: 0 copies the input's dimension at that index, -1 is inferred."""
    if len(in_shape) and dim_product(in_shape) == 0:
        # NOTE: Paddle's rule for a zero-size input (found by running it): 0 is a literal 0; -1 is
        # the product of the input's nonzero dims over the target's nonzero ones if the target
        # has a 0 elsewhere, else 0. (1, 0, 2, 2) by [0, -1] is (0, 4), by [2, -1] is (2, 0).
        dims = list(shape)
        if -1 in dims:
            nonzero_in = dim_product([d for d in in_shape if d != 0])
            nonzero_known = dim_product([d for d in dims if d not in (0, -1)])
            dims[dims.index(-1)] = nonzero_in // nonzero_known if 0 in dims else 0
        return tuple(dims)
    dims = [in_shape[i] if d == 0 else d for i, d in enumerate(shape)]
    if -1 in dims:
        known = dim_product([d for d in dims if d != -1])
        total = dim_product(in_shape)
        dims[dims.index(-1)] = total // known if known else 0
    return tuple(dims)


@lowering("pd_op.reshape", "pd_op.reshape_")
def reshape(x, shape):
    target = reshape_target(np.shape(x), static_ints(shape))
    return xp_for_shape(target, x).reshape(x, target)


@lowering("pd_op.transpose", "pd_op.transpose_")
def transpose(x, *, perm):
    return xp(x).transpose(x, [p % max(np.ndim(x), 1) for p in perm])


@lowering("pd_op.squeeze", "pd_op.squeeze_")
def squeeze(x, axis):
    shape = np.shape(x)
    axes = static_ints(axis)
    if not axes:
        axes = [i for i, d in enumerate(shape) if d == 1]
    # NOTE: Paddle skips a listed axis whose size is not 1 instead of failing like NumPy.
    drop = {a % len(shape) for a in axes if shape and shape[a % len(shape)] == 1}
    return xp(x).reshape(x, tuple(d for i, d in enumerate(shape) if i not in drop))


@lowering("pd_op.unsqueeze", "pd_op.unsqueeze_")
def unsqueeze(x, axis):
    # NOTE: axes are inserted one after another; a negative axis counts from the current rank + 1.
    shape = list(np.shape(x))
    for a in static_ints(axis):
        shape.insert(a + len(shape) + 1 if a < 0 else a, 1)
    return xp(x).reshape(x, tuple(shape))


@lowering("pd_op.flatten", "pd_op.flatten_")
def flatten(x, *, start_axis=1, stop_axis=1):
    shape = np.shape(x)
    if not shape:
        return xp(x).reshape(x, (1,))
    start, stop = start_axis % len(shape), stop_axis % len(shape)
    new = shape[:start] + (dim_product(shape[start : stop + 1]),) + shape[stop + 1 :]
    return xp(x).reshape(x, new)


@lowering("pd_op.numel")
def numel(x):
    return np.asarray(np.size(x), dtype=np.int64)


# ---- broadcasting -------------------------------------------------------------------------------
def expand_target(in_shape, shape) -> tuple[int, ...]:
    """expand's target: -1 keeps the input's dimension (aligned from the right)."""
    lead = len(shape) - len(in_shape)
    return tuple(in_shape[i - lead] if d == -1 else d for i, d in enumerate(shape))


def _broadcast(x, shape):
    out = xp_for_shape(shape, x).broadcast_to(x, tuple(shape))
    return np.array(out) if isinstance(out, np.ndarray) else out


@lowering("pd_op.expand")
def expand(x, shape):
    return _broadcast(x, expand_target(np.shape(x), static_ints(shape)))


@lowering("pd_op.expand_as")
def expand_as(x, y, *, target_shape=()):
    # NOTE: y's real shape, not target_shape: the attribute holds -1 where y's dim was unknown at capture.
    shape = list(np.shape(y)) if y is not None else list(target_shape)
    return _broadcast(x, expand_target(np.shape(x), shape))


@lowering("pd_op.broadcast_tensors")
def broadcast_tensors(xs):
    shape = np.broadcast_shapes(*[np.shape(x) for x in xs])
    return [_broadcast(x, shape) for x in xs]


@lowering("pd_op.tile")
def tile(x, repeat_times):
    return xp(x).tile(x, tuple(static_ints(repeat_times)))


@lowering("pd_op.meshgrid")
def meshgrid(xs):
    flat = [xp(x).reshape(x, (-1,)) for x in xs]
    return list(xp(*flat).meshgrid(*flat, indexing="ij"))


# ---- joining and splitting ----------------------------------------------------------------------
@lowering("pd_op.concat")
def concat(xs, axis):
    return xp(*xs).concatenate(xs, axis=_axis(axis, np.ndim(xs[0])))


@lowering("pd_op.stack")
def stack(xs, *, axis=0):
    return xp(*xs).stack(xs, axis=axis % (np.ndim(xs[0]) + 1))


def _split_at(x, sizes, axis):
    m = xp(x)
    bounds = np.cumsum(sizes)[:-1]
    return list(m.split(x, [int(b) for b in bounds], axis=axis))


@lowering("pd_op.split")
def split(x, sections, axis):
    ax = _axis(axis, np.ndim(x))
    sizes = static_ints(sections)
    if -1 in sizes:
        sizes[sizes.index(-1)] = np.shape(x)[ax] - (sum(sizes) + 1)
    return _split_at(x, sizes, ax)


@lowering("pd_op.split_with_num")
def split_with_num(x, axis, *, num):
    ax = _axis(axis, np.ndim(x))
    return _split_at(x, [np.shape(x)[ax] // num] * num, ax)


def _unbind(x, axis):
    ax = axis % np.ndim(x)
    m = xp(x)
    return [m.squeeze(p, axis=ax) for p in m.split(x, np.shape(x)[ax], axis=ax)]


@lowering("pd_op.unstack")
def unstack(x, *, axis=0, num=0):
    return _unbind(x, axis)


@lowering("pd_op.unbind")
def unbind(x, *, axis=0):
    return _unbind(x, axis)


# ---- reordering ----------------------------------------------------------------------------------
@lowering("pd_op.flip")
def flip(x, *, axis):
    axes = [axis] if isinstance(axis, int) else axis
    return xp(x).flip(x, axis=axis_list(list(axes), np.ndim(x)))


@lowering("pd_op.reverse")
def reverse(x, axis):
    return xp(x).flip(x, axis=axis_list(static_ints(axis), np.ndim(x)))


@lowering("pd_op.roll")
def roll(x, shifts, *, axis=()):
    shifts = static_ints(shifts)
    m = xp(x)
    if not len(axis):
        # NOTE: no axis means roll the flattened tensor, then restore the shape.
        return m.reshape(m.roll(m.reshape(x, (-1,)), shifts[0]), np.shape(x))
    return m.roll(x, tuple(shifts), axis=tuple(axis))


@lowering("pd_op.repeat_interleave")
def repeat_interleave(x, *, repeats, axis, output_size=-1):
    return xp(x).repeat(x, repeats, axis=axis % max(np.ndim(x), 1))


@lowering("pd_op.repeat_interleave_with_tensor_index")
def repeat_interleave_with_tensor_index(x, repeats, *, axis, output_size=-1):
    ax = axis % max(np.ndim(x), 1)
    if xp(repeats) is np:
        return xp(x).repeat(x, np.asarray(repeats).reshape(-1), axis=ax)
    if output_size is None or output_size < 0:
        raise ValueError(
            "repeat_interleave with repeats computed from the inputs has a data-dependent "
            "shape; give output_size=, or make repeats a constant"
        )
    return jnp.repeat(x, repeats.reshape(-1), axis=ax, total_repeat_length=output_size)
