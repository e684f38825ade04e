"""Matrix and tensor products: matmul, bmm, dot, mv, einsum, kron, addmm, baddbmm, cross, trace."""

from __future__ import annotations

import jax.numpy as jnp

from .registry import lowering


@lowering("pd_op.matmul", amp="white")
def matmul(x, y, *, transpose_x=False, transpose_y=False):
    # NOTE: Paddle treats 1-D operands like NumPy's matmul does, after the optional transposes.
    if transpose_x and x.ndim >= 2:
        x = jnp.swapaxes(x, -1, -2)
    if transpose_y and y.ndim >= 2:
        y = jnp.swapaxes(y, -1, -2)
    return jnp.matmul(x, y)


@lowering("pd_op.bmm", amp="white")
def bmm(x, y):
    return jnp.matmul(x, y)


@lowering("pd_op.dot")
def dot(x, y):
    # NOTE: on 2-D operands Paddle's dot is a row-wise dot product, one value per row.
    return jnp.sum(x * y, axis=-1)


@lowering("pd_op.mv", amp="white")
def mv(x, vec):
    return jnp.matmul(x, vec)


@lowering("pd_op.einsum", amp="white")
def einsum(operands, *, equation):
    # NOTE: PIR also declares inner_cache and xshape outputs (lists, one entry per operand) that only
    # Paddle's own backward reads.
    out = jnp.einsum(equation, *operands)
    blanks = [None] * len(operands)
    return out, list(blanks), list(blanks)


@lowering("pd_op.kron")
def kron(x, y):
    return jnp.kron(x, y)


@lowering("pd_op.addmm", amp="white")
def addmm(input, x, y, *, beta=1.0, alpha=1.0):
    prod = jnp.matmul(x, y)
    return jnp.asarray(beta, prod.dtype) * input + jnp.asarray(alpha, prod.dtype) * prod


@lowering("pd_op.baddbmm")
def baddbmm(input, x, y, *, beta=1.0, alpha=1.0):
    prod = jnp.matmul(x, y)
    return jnp.asarray(beta, prod.dtype) * input + jnp.asarray(alpha, prod.dtype) * prod


@lowering("pd_op.cross")
def cross(x, y, *, axis=9):
    # NOTE: axis 9 is Paddle's "not given": the first axis of size 3.
    if axis == 9:
        axis = next(i for i, d in enumerate(x.shape) if d == 3)
    return jnp.cross(x, y, axis=axis)


@lowering("pd_op.trace")
def trace(x, *, offset=0, axis1=0, axis2=1):
    return jnp.trace(x, offset=offset, axis1=axis1, axis2=axis2)
