"""Paddle APIs that refuse static mode, given their static meaning while paddle_xla captures a model.

`Tensor.view(shape)`, `paddle.view` and `Tensor.view_as` are eager-only in Paddle 3 (`@dygraph_only`:
"We only support 'view()' in dynamic graph mode"), because an eager view shares its base's memory. A
static program has no shared memory to keep: a view by shape is the reshape it reads as, which is
what PaddleFormers' MoE blocks (Qwen2-MoE, Qwen3-MoE, DeepSeek-V3) mean by it. Inside `eager_only()`
those calls build a `reshape`; the model is not touched, and the originals are put back when the block
ends. A view that reinterprets bits (`view(dtype)` to another dtype) has no such reading and stays
refused, now with a CaptureError that says so.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence

import paddle

from ..errors import CaptureError

_LOCK = threading.RLock()
_EAGER_VIEW = paddle.tensor.manipulation.view
_EAGER_VIEW_AS = paddle.tensor.manipulation.view_as


def _shape_or_dtype(args: tuple, kwargs: dict):
    """view's argument in any of Paddle's spellings: view([2, 3]), view(2, 3), view(size=...), view(dtype=...)."""
    given = kwargs.get("shape_or_dtype", kwargs.get("size", kwargs.get("dtype")))
    if given is None:
        given = args[0] if len(args) == 1 else list(args)
    return given


def _is_shape(value) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str) or isinstance(value, paddle.pir.Value)


def static_view(x, *args, **kwargs):
    """Tensor.view in a static program: a reshape by shape; by its own dtype, x itself."""
    if paddle.in_dynamic_mode():  # NOTE: an eager call inside the block keeps its aliasing view
        return _EAGER_VIEW(x, *args, **kwargs)
    target = _shape_or_dtype(args, kwargs)
    if _is_shape(target):
        return paddle.reshape(x, target)
    if paddle.base.framework.convert_np_dtype_to_dtype_(target) == x.dtype:
        return x
    raise CaptureError(
        f"Tensor.view({target}) reinterprets a {x.dtype} tensor's bits as another dtype, which paddle_xla "
        "cannot capture (Paddle allows it only in eager mode); use astype() for a conversion of values"
    )


def static_view_as(x, other, name=None):
    """Tensor.view_as in a static program: x reshaped to other's shape."""
    if paddle.in_dynamic_mode():
        return _EAGER_VIEW_AS(x, other, name)
    return paddle.reshape(x, paddle.shape(other) if -1 in other.shape else other.shape)


# NOTE: (owner, attribute, replacement). pir.Value's methods were copied from paddle.tensor at import
# (pir/math_op_patch.py), so the method and the module functions are replaced one by one.
def _sites():
    return [
        (paddle.pir.Value, "view", static_view),
        (paddle.pir.Value, "view_as", static_view_as),
        (paddle, "view", static_view),
        (paddle, "view_as", static_view_as),
        (paddle.tensor, "view", static_view),
        (paddle.tensor, "view_as", static_view_as),
    ]


EAGER_ONLY_CAPTURED = ("Tensor.view(shape)", "paddle.view(x, shape)", "Tensor.view_as(other)")


@contextlib.contextmanager
def eager_only():
    """Within the block, the eager-only calls above build their static meaning (re-entrant)."""
    with _LOCK:
        saved = [(owner, name, owner.__dict__.get(name, getattr(owner, name, None))) for owner, name, _ in _sites()]
        for owner, name, fn in _sites():
            setattr(owner, name, fn)
        try:
            yield
        finally:
            for owner, name, fn in saved:
                setattr(owner, name, fn)
