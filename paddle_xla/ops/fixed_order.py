"""Sums along the last axis in one fixed order, whatever the shape around it, and paddle_xla.row_mean, the
mean a generation program takes with them (generation/row_means.py renames pd_op.mean to it).

XLA:CPU's reduce emits other loops for other leading shapes: a row's sum over 768 values came out 1 ulp
apart at 2-5 rows and at 32 (the RMS norm's mean of squares, the softmax's normalising sum over the
vocabulary). A paged server runs a decode step for as many rows as are busy (generation/paged_engine.py),
so a row's numbers must not depend on how many rows its step carries. Here a sum is a chain of adds over
groups of LANES neighbours, then the same over the group sums, until one is left: elementwise adds, which
XLA keeps in order and rounds the same in every loop, so each row's sum is the same bits in any batch.
Zeros pad a group; adding an exact zero changes nothing. Paddle-free."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .reduce import _axes, _int_like, mean
from .registry import lowering

LANES = 16  # NOTE: neighbours summed as one chain: a multiple of the SIMD width keeps the chains vector code


def fold(x, axis):
    """The sum along `axis`, one element after the other (XLA keeps the order of a chain of adds)."""
    axis = axis % x.ndim
    # NOTE: one split, not an index per element: numpy-style indexing costs 10x the trace time of an add, and
    # every batch-invariant program traces hundreds of these chains
    parts = lax.split(x, [1] * x.shape[axis], axis=axis)
    out = parts[0]
    for part in parts[1:]:
        out = out + part
    return lax.squeeze(out, (axis,))


def fixed_sum(x, keepdims: bool = False):
    """x summed along its last axis in a fixed order (module docstring)."""
    while x.shape[-1] > 1:
        x = fold(blocks(x, 0.0), axis=-1)
    return x if keepdims else x[..., 0]


def blocks(x, fill):
    """x [..., S] as [..., ceil(S / LANES), LANES], the last block filled with `fill` (padded_lanes)."""
    x = padded_lanes(x, fill)
    return x.reshape(*x.shape[:-1], x.shape[-1] // LANES, LANES)


def padded_lanes(x, fill):
    """x with its last axis filled up to a whole number of LANES with `fill`: XLA:CPU rounds a transcendental
    (exp, log) in a loop's vector body and in its scalar remainder differently, and which one a row's last
    values fall in depends on how many rows there are, unless every row is a whole number of vectors."""
    extra = -x.shape[-1] % LANES
    if not extra:
        return x
    return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, extra)], constant_values=fill)


def log_softmax(x):
    """log_softmax over the last axis (jax.nn.log_softmax's formula), its sum in a fixed order."""
    v = x.shape[-1]
    shifted = padded_lanes(x, -jnp.inf) - jnp.max(x, axis=-1, keepdims=True)
    return (shifted - jnp.log(fixed_sum(jnp.exp(shifted), keepdims=True)))[..., :v]


def softmax(x):
    """softmax over the last axis, its normalising sum in a fixed order: exp(log_softmax(x)). Dividing by the
    sum instead rounded a row otherwise below 16 rows of a 256-token vocabulary (XLA:CPU's division loop)."""
    return jnp.exp(log_softmax(x))


@lowering("paddle_xla.row_mean", amp="black")
def row_mean(x, axis, *, keepdim=False):
    """pd_op.mean, over the last axis of a float in a fixed order (module docstring); any other mean as
    pd_op.mean takes it."""
    if _int_like(x) or _axes(x, axis) != (x.ndim - 1,) or x.shape[-1] == 0:
        return mean(x, axis, keepdim=keepdim)
    # NOTE: summed in float32 at least, as jnp.mean sums a half-precision float
    total = fixed_sum(x.astype(jnp.promote_types(x.dtype, jnp.float32)), keepdims=keepdim)
    return (total / x.shape[-1]).astype(x.dtype)
