"""Paddle's int64 and float64, without JAX's process-wide switch.

Paddle computes with int64 indices and float64 tensors where the user asks for them; without x64,
JAX narrows both and the numbers differ from Paddle's. Turning `jax_enable_x64` on for the whole
process would change every other JAX program in it (int64 defaults, slow emulated int64 on TPU), so
paddle_xla turns it on only while its own code traces, compiles, feeds and runs a program: every
public entry point runs under `scope()`. JAX keeps the setting per thread, and entering it costs
~1.5 us (measured here), so a server thread pays nothing worth counting. Paddle-free."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import jax

F = TypeVar("F", bound=Callable)


def scope():
    """A context in which JAX keeps 64-bit dtypes (this thread only)."""
    return jax.enable_x64(True)


def enabled(fn: F) -> F:
    """`fn`, run under scope()."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with jax.enable_x64(True):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


C = TypeVar("C", bound=type)


def methods(cls: C) -> C:
    """`cls` with its own public methods, __init__ and __call__ run under scope()."""
    for name, value in list(vars(cls).items()):
        if (
            callable(value)
            and not isinstance(value, (staticmethod, classmethod, type))
            and (not name.startswith("_") or name in ("__init__", "__call__"))
        ):
            setattr(cls, name, enabled(value))
    return cls
