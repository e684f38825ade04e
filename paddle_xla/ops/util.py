"""Small helpers shared by the lowerings."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_DTYPES = {
    "float32": jnp.float32,
    "float64": jnp.float64,
    "float16": jnp.float16,
    "bfloat16": jnp.bfloat16,
    "int8": jnp.int8,
    "int16": jnp.int16,
    "int32": jnp.int32,
    "int64": jnp.int64,
    "uint8": jnp.uint8,
    "bool": jnp.bool_,
    "complex64": jnp.complex64,
    "complex128": jnp.complex128,
}


def dtype(name):
    """Paddle dtype name -> JAX dtype; None (Paddle's UNDEFINED) stays None."""
    if name is None or name == "":
        return None
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype {name!r} has no JAX equivalent here") from None


def is_static(*xs) -> bool:
    """True when every input is a NumPy value, known at trace time (shape arithmetic). A shape with
    symbolic dimensions (a jax.export of a None dimension) is a NumPy object array of ints and symbols."""
    return all(isinstance(x, (np.ndarray, np.generic, int, float, bool)) or is_symbol(x) for x in xs)


def is_symbol(x) -> bool:
    """A symbolic dimension of jax.export's shape polymorphism (d0, 2*d1, ...)."""
    return type(x).__name__ == "_DimExpr"


def is_symbolic(x) -> bool:
    """A static value that holds symbolic dimensions: a symbol, or an object array of ints and symbols."""
    return is_symbol(x) or (isinstance(x, np.ndarray) and x.dtype == object)


def dims_array(dims, dtype) -> np.ndarray:
    """A shape as a static array: of `dtype` when every dimension is known, else an object array that
    keeps the symbols, so shape arithmetic (slices, products, concatenation) goes on in NumPy."""
    dims = tuple(dims)
    if all(isinstance(d, (int, np.integer)) for d in dims):
        return np.asarray(dims, dtype=dtype)
    return np.asarray(dims, dtype=object)


def dim_product(dims):
    """The product of shape dimensions: an int when all are known, else a symbolic expression."""
    total = 1
    for d in dims:
        total = total * (d if is_symbol(d) else int(d))
    return total


def as_traced(x, dtype=np.int64):
    """A static value as a JAX array of `dtype` (symbols become their run-time values), where it meets one."""
    if is_symbol(x):
        return jnp.asarray(x, dtype)
    if is_symbolic(x):
        return jnp.stack([jnp.asarray(v, dtype) for v in np.ravel(x)]).reshape(np.shape(x))
    return x


def traced_where_symbols_meet_arrays(*xs) -> list:
    """Operands of an elementwise op: where a value holding symbolic dimensions meets a traced array it
    becomes traced too (NumPy cannot compute with a traced value); among static values it stays a
    symbol, so shape arithmetic stays static."""
    if any(is_symbolic(x) for x in xs) and not is_static(*xs):
        return [as_traced(x) if is_symbolic(x) else x for x in xs]
    return list(xs)


def xp_for_shape(shape, *xs):
    """The array module for building a value of `shape` from xs: JAX's when the shape holds a symbolic
    dimension (NumPy cannot allocate one), else as xp."""
    return jnp if any(is_symbol(d) for d in shape) else xp(*xs)


def xp(*xs):
    """NumPy when every input is static, else jax.numpy. Shape arithmetic on constants stays NumPy,
    so jit never sees it as traced (a reshape's target shape must be concrete)."""
    return np if is_static(*xs) else jnp


def static_ints(x) -> list[int]:
    """A shape-like operand (IntArray) as Python ints. It must be known at trace time."""
    if isinstance(x, (list, tuple)):
        return [v for e in x for v in static_ints(e)]
    if isinstance(x, (int, np.integer)):
        return [int(x)]
    if is_symbol(x):
        return [x]
    if not is_static(x):
        raise ValueError(
            "this operand must be known before running (a constant or a shape), "
            "but it is computed from the inputs' values"
        )
    return [v if is_symbol(v) else int(v) for v in np.asarray(x).reshape(-1)]


def static_scalar(x):
    """A scalar operand known at trace time, as a Python number."""
    if not is_static(x):
        raise ValueError("this scalar operand must be a constant, but it depends on the inputs' values")
    if is_symbol(x):
        return x
    v = np.asarray(x).reshape(-1)[0]
    # NOTE: an object array of a shape with symbols holds its known sizes as Python ints already
    return v if is_symbol(v) or not isinstance(v, np.generic) else v.item()


def axis_list(axis, ndim) -> tuple[int, ...]:
    """Paddle's axis argument (int, list, empty = all) as a tuple of non-negative axes."""
    axes = static_ints(axis) if not isinstance(axis, int) else [axis]
    if len(axes) == 0:
        return tuple(range(ndim))
    return tuple(a % ndim if ndim else 0 for a in axes)


def on_xla_cpu() -> bool:
    """True when programs compile for XLA:CPU. Several lowering and layout choices are measured there
    and made only there (GEMM convolutions, channels-last, HWIO filters, attention's dot layout); each
    caller says why in its own comment."""
    return jax.default_backend() == "cpu"
