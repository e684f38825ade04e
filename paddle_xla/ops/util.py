"""Small helpers shared by the lowerings."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_DTYPES = {
    "float32": jnp.float32, "float64": jnp.float64, "float16": jnp.float16, "bfloat16": jnp.bfloat16,
    "int8": jnp.int8, "int16": jnp.int16, "int32": jnp.int32, "int64": jnp.int64, "uint8": jnp.uint8,
    "bool": jnp.bool_, "complex64": jnp.complex64, "complex128": jnp.complex128,
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
    """True when every input is a NumPy value, known at trace time (shape arithmetic)."""
    return all(isinstance(x, (np.ndarray, np.generic, int, float, bool)) for x in xs)


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
    if not is_static(x):
        raise ValueError("this operand must be known before running (a constant or a shape), "
                         "but it is computed from the inputs' values")
    return [int(v) for v in np.asarray(x).reshape(-1)]


def static_scalar(x):
    """A scalar operand known at trace time, as a Python number."""
    if not is_static(x):
        raise ValueError("this scalar operand must be a constant, but it depends on the inputs' values")
    return np.asarray(x).reshape(-1)[0].item()


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
