"""Programs that make Paddle kill the process while to_static builds them, found first.

Some ops abort inside Paddle's C++ when their output count depends on a dimension the InputSpec
leaves free (None): `paddle.unstack(x, axis)` along such a dimension asks for -1 outputs, and
Paddle's InferMeta dies with std::length_error, taking the interpreter with it. While a capture
runs, the _C_ops entry points of those ops are wrapped so that the pattern raises a CaptureError
naming the user's line, before Paddle sees it."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from ..errors import CaptureError

# NOTE: to_static reports where in the user's source a failing call was, as File "...", line N
_WHERE = re.compile(r'File "([^"]+)", line (\d+), in ')


def located(message: str, paddle_error: BaseException) -> CaptureError:
    """The finding, at the user's line that Paddle's own report of the failure names."""
    where = _WHERE.search(str(paddle_error))
    at = f" ({where[1]}:{where[2]})" if where else ""
    return CaptureError(message.replace("{where}", at))


def _unstack(original, found: list):
    def checked(x, axis, num, *rest):
        if num is not None and num < 0:
            found.append(
                f"paddle.unstack along dimension {axis} of shape {list(x.shape)}{{where}}: that "
                "dimension is None in the InputSpec, and Paddle's to_static cannot unstack a dimension of "
                "unknown size (it would abort the process). Give it a fixed size in the InputSpec, or "
                "index (x[i]) or paddle.split with a known count instead."
            )
            raise CaptureError(found[-1].replace("{where}", ""))
        return original(x, axis, num, *rest)

    return checked


_GUARDS = {"unstack": _unstack}


@contextlib.contextmanager
def guarded() -> Iterator[list]:
    """Inside: the guarded _C_ops entry points raise instead of aborting; what they found is in the
    list yielded (Paddle re-raises the error with its own report around it: see located)."""
    from paddle import _C_ops

    saved = {name: getattr(_C_ops, name) for name in _GUARDS if hasattr(_C_ops, name)}
    found: list[str] = []
    try:
        for name, original in saved.items():
            setattr(_C_ops, name, _GUARDS[name](original, found))
        yield found
    finally:
        for name, original in saved.items():
            setattr(_C_ops, name, original)
