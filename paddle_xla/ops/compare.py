"""Comparisons, logic and bitwise ops (no gradients: their results are bool or integer)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .elementwise import align
from .registry import lowering
from .util import as_traced, is_symbolic, static_scalar, xp


def _binary(name, np_name):
    @lowering(name)
    def binary(x, y):
        x, y = align(x, y)
        if is_symbolic(x) or is_symbolic(y):
            try:
                return np.asarray(getattr(np, np_name)(x, y)).astype(bool)
            except jax.errors.InconclusiveDimensionOperation:
                # NOTE: a symbolic dimension against a constant (batch > 2) is decided when it runs.
                x, y = as_traced(x), as_traced(y)
        return getattr(xp(x, y), np_name)(x, y)

    binary.__name__ = name.split(".")[-1]
    return binary


for _op, _fn in [
    ("equal", "equal"),
    ("not_equal", "not_equal"),
    ("less_than", "less"),
    ("less_equal", "less_equal"),
    ("greater_than", "greater"),
    ("greater_equal", "greater_equal"),
    ("bitwise_and", "bitwise_and"),
    ("bitwise_or", "bitwise_or"),
    ("bitwise_xor", "bitwise_xor"),
]:
    _binary(f"pd_op.{_op}", _fn)


def _truth(x):
    # NOTE: Paddle's logical ops accept any dtype and read non-zero as true.
    return x if x.dtype == bool else x != 0


def _logical(name, np_name):
    @lowering(name)
    def logical(x, y):
        return getattr(xp(x, y), np_name)(_truth(x), _truth(y))

    logical.__name__ = name.split(".")[-1]
    return logical


for _op in ("and", "or", "xor"):
    _logical(f"pd_op.logical_{_op}", f"logical_{_op}")


@lowering("pd_op.logical_not")
def logical_not(x):
    return xp(x).logical_not(_truth(x))


@lowering("pd_op.bitwise_not")
def bitwise_not(x):
    return xp(x).invert(x)


def _shift(x, y, left, is_arithmetic):
    m = xp(x, y)
    if left:
        return m.left_shift(x, y)
    if is_arithmetic or np.dtype(x.dtype).kind == "u":
        return m.right_shift(x, y)
    # NOTE: a logical right shift treats the bits as unsigned.
    unsigned = np.dtype(f"uint{np.dtype(x.dtype).itemsize * 8}")
    return m.right_shift(x.astype(unsigned), y.astype(unsigned)).astype(x.dtype)


@lowering("pd_op.bitwise_left_shift")
def bitwise_left_shift(x, y, *, is_arithmetic=True):
    return _shift(x, y, True, is_arithmetic)


@lowering("pd_op.bitwise_right_shift")
def bitwise_right_shift(x, y, *, is_arithmetic=True):
    return _shift(x, y, False, is_arithmetic)


def _close(x, y, rtol, atol, equal_nan):
    # NOTE: Paddle's kernel, step by step: |a - b| in the inputs' dtype, against atol + rtol * |b|
    # computed in float64 (rtol/atol are doubles) and rounded to that dtype, or within 1e-15 of it.
    # So an infinite y is close to every finite x (inf <= inf), while an infinite x is close to a
    # finite y only if equal: Paddle's answer, which numpy's isclose does not share.
    rtol, atol = static_scalar(rtol), static_scalar(atol)
    a, b = jnp.asarray(x), jnp.asarray(y)
    if not jnp.issubdtype(a.dtype, jnp.inexact):
        a, b = a.astype(jnp.float64), b.astype(jnp.float64)
    left = jnp.where(a > b, a - b, b - a)
    right = (atol + rtol * jnp.abs(b.astype(jnp.float64))).astype(a.dtype)
    diff = jnp.where(left > right, left - right, right - left)
    close = (a == b) | (left <= right) | (diff.astype(jnp.float64) <= 1e-15)
    nan = jnp.isnan(a) | jnp.isnan(b)
    both_nan = jnp.isnan(a) & jnp.isnan(b)
    return jnp.where(nan, both_nan if equal_nan else False, close)


@lowering("pd_op.isclose")
def isclose(x, y, rtol, atol, *, equal_nan=False):
    return _close(x, y, rtol, atol, equal_nan)


@lowering("pd_op.allclose")
def allclose(x, y, rtol, atol, *, equal_nan=False):
    return jnp.all(_close(x, y, rtol, atol, equal_nan))


@lowering("pd_op.equal_all")
def equal_all(x, y):
    if np.shape(x) != np.shape(y):
        return jnp.asarray(False)
    return jnp.all(jnp.asarray(x) == jnp.asarray(y))
