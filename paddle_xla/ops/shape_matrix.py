"""Matrix-shaped ops: triangles, diagonals, eye, and evenly spaced ranges (linspace, logspace)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import lowering
from .util import dtype as jax_dtype
from .util import is_static, static_scalar, xp


@lowering("pd_op.tril", "pd_op.tril_")
def tril(x, *, diagonal=0):
    return xp(x).tril(x, diagonal)


@lowering("pd_op.triu", "pd_op.triu_")
def triu(x, *, diagonal=0):
    return xp(x).triu(x, diagonal)


@lowering("pd_op.tril_indices")
def tril_indices(*, rows, cols, offset, dtype):
    return np.stack(np.tril_indices(rows, offset, cols)).astype(jax_dtype(dtype))


@lowering("pd_op.triu_indices")
def triu_indices(*, row, col, offset, dtype):
    return np.stack(np.triu_indices(row, offset, col)).astype(jax_dtype(dtype))


@lowering("pd_op.eye")
def eye(num_rows, num_columns, *, dtype):
    rows = int(static_scalar(num_rows))
    cols = int(static_scalar(num_columns))
    return np.eye(rows, rows if cols < 0 else cols, dtype=jax_dtype(dtype))


# ---- diagonals ---------------------------------------------------------------------------------
def _diag_positions(n_rows, n_cols, offset):
    """Row and column indices of the `offset` diagonal of an n_rows x n_cols matrix."""
    length = max(min(n_rows + min(offset, 0), n_cols - max(offset, 0)), 0)
    i = np.arange(length)
    return i - min(offset, 0), i + max(offset, 0)


@lowering("pd_op.diag")
def diag(x, *, offset=0, padding_value=0.0):
    m = xp(x)
    if np.ndim(x) == 2:
        return m.diagonal(x, offset)
    n = np.shape(x)[0] + abs(offset)
    rows, cols = _diag_positions(n, n, offset)
    out = m.full((n, n), padding_value, dtype=x.dtype)
    if m is np:
        out[rows, cols] = x
        return out
    return out.at[rows, cols].set(x)


@lowering("pd_op.diagonal")
def diagonal(x, *, offset=0, axis1=0, axis2=1):
    return xp(x).diagonal(x, offset, axis1, axis2)


@lowering("pd_op.diag_embed")
def diag_embed(x, *, offset=0, dim1=-2, dim2=-1):
    n = np.shape(x)[-1] + abs(offset)
    rows, cols = _diag_positions(n, n, offset)
    out = jnp.zeros(np.shape(x)[:-1] + (n, n), dtype=x.dtype).at[..., rows, cols].set(x)
    rank = np.ndim(x) + 1
    return jnp.moveaxis(out, (-2, -1), (dim1 % rank, dim2 % rank))


@lowering("pd_op.fill_diagonal_tensor", "pd_op.fill_diagonal_tensor_")
def fill_diagonal_tensor(x, y, *, offset=0, dim1=0, dim2=1):
    nd = np.ndim(x)
    d1, d2 = dim1 % nd, dim2 % nd
    moved = jnp.moveaxis(x, (d1, d2), (-2, -1))
    rows, cols = _diag_positions(np.shape(x)[d1], np.shape(x)[d2], offset)
    # NOTE: y is laid out as x's other dims then the diagonal (a 2-D x gets y as [1, length]).
    y = jnp.reshape(jnp.asarray(y, dtype=x.dtype), moved.shape[:-2] + (len(rows),))
    # NOTE: Paddle's fill_diagonal_tensor_grad returns only x's gradient; y gets none. Training
    # parity with Paddle means y gets none here too.
    y = lax.stop_gradient(y)
    moved = moved.at[..., rows, cols].set(y)
    return jnp.moveaxis(moved, (-2, -1), (d1, d2))


@lowering("pd_op.fill_diagonal", "pd_op.fill_diagonal_")
def fill_diagonal(x, *, value=0.0, offset=0, wrap=False):
    # NOTE: Paddle walks the flat buffer in steps of (sum of strides) and skips positions whose
    # offset leaves the row; the positions depend only on the shape, so they are computed here.
    shape = np.shape(x)
    strides = np.cumprod((shape[1:] + (1,))[::-1])[::-1]
    step = int(strides.sum())
    size = int(np.prod(shape)) if wrap else min(int(np.prod(shape)), shape[1] * shape[1])
    flat = np.arange(0, size, step)
    keep = (flat % shape[1] + offset >= 0) & (flat % shape[1] + offset < shape[1])
    positions = flat[keep] + offset
    out = jnp.asarray(x).reshape(-1).at[positions].set(jnp.asarray(value, dtype=x.dtype))
    return out.reshape(shape)


# ---- evenly spaced values ------------------------------------------------------------------------
def _spaced_exponents(start, stop, num, dt, m):
    """Paddle's linspace arithmetic: ends cast to the dtype, steps in float64, filled from both ends."""
    start = m.asarray(start).reshape(()).astype(dt).astype(np.float64)
    stop = m.asarray(stop).reshape(()).astype(dt).astype(np.float64)
    if num == 1:
        return m.reshape(start, (1,))
    step = (stop - start) / (num - 1)
    i = np.arange(num, dtype=np.float64)
    return m.where(i < num // 2, start + step * i, stop - step * (num - 1 - i))


@lowering("pd_op.linspace")
def linspace(start, stop, number, *, dtype):
    num = int(static_scalar(number))
    dt = jax_dtype(dtype)
    m = np if is_static(start, stop) else jnp
    if num == 0:
        return m.zeros((0,), dtype=dt)
    return _spaced_exponents(start, stop, num, dt, m).astype(dt)


@lowering("pd_op.logspace")
def logspace(start, stop, num, base, *, dtype):
    n = int(static_scalar(num))
    dt = jax_dtype(dtype)
    m = np if is_static(start, stop, base) else jnp
    exponents = _spaced_exponents(start, stop, n, dt, m)
    b = m.asarray(base).reshape(()).astype(dt).astype(np.float64)
    return m.power(b, exponents).astype(dt)
