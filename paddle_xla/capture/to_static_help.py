"""What paddle.jit.to_static should leave to Python, and what to say when it cannot convert a function.

Model configs (PaddleFormers' PretrainedConfig and its kin) are plain Python objects with their own
attribute accessors. to_static converts whatever forward calls, `config.get(...)` included, and
converting an accessor inherited by a subclass that calls zero-argument `super()` recurses without
end: the converted copy resolves `super()` against the subclass, which calls the accessor again
(found with a stand-in: tests/test_errors.py). So before capture, the accessors of every non-Layer
object a Layer holds are marked `paddle.jit.not_to_static`: they run as Python, as they should. An
edge module (imports paddle)."""

from __future__ import annotations

import os
import re
import sys
import types

import paddle

# NOTE: the methods through which a config is read; none of them computes with tensors.
ACCESSORS = ("__getattribute__", "__getattr__", "get", "__getitem__", "__contains__")


def leave_accessors_to_python(layer: paddle.nn.Layer) -> list[str]:
    """Mark the accessors of the plain objects `layer` and its sublayers hold as not_to_static; returns
    the qualified names marked."""
    marked = []
    for sub in layer.sublayers(include_self=True):
        for value in list(vars(sub).values()):
            if (
                isinstance(value, (paddle.nn.Layer, paddle.Tensor, type, types.ModuleType))
                or callable(value)
                or type(value).__module__ == "builtins"
            ):
                continue
            marked += _mark(type(value))
    return sorted(set(marked))


def _mark(cls: type) -> list[str]:
    out = []
    for klass in cls.__mro__:
        if klass is object or klass.__module__ == "builtins":
            continue
        for name in ACCESSORS:
            fn = klass.__dict__.get(name)
            if isinstance(fn, types.FunctionType):
                paddle.jit.not_to_static(fn)
                out.append(fn.__qualname__)
    return out


def recursion_culprit(error: BaseException) -> str | None:
    """The function to_static was converting when it recursed without end, from the traceback."""
    found = None
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name in ("convert_call", "convert_to_static"):
            fn = frame.f_locals.get("func") or frame.f_locals.get("function")
            name = getattr(fn, "__qualname__", None)
            if name is not None:
                found = f"{getattr(fn, '__module__', '?')}.{name}"
        tb = tb.tb_next
    return found


# NOTE: Paddle ops whose static builders fail on a CPU-only Paddle, and the model setting that avoids them.
CPU_ONLY_HINTS = {
    # NOTE: capture builds this op from its parts on a CPU-only Paddle (gpu_only_ops.py); the hint is for a
    # call that reaches Paddle's own builder anyway
    "fused_rms_norm_ext": "the model's fused RMSNorm (fuse_rms_norm=True, PaddleFormers' default) needs Paddle's "
    "GPU build to capture; set fuse_rms_norm=False in its config (the numbers are the same)",
}


def hint(message: str) -> str:
    """A sentence on what to change, when `message` (Paddle's error) names an op with a known way around."""
    return next((f" Hint: {text}." for op, text in CPU_ONLY_HINTS.items() if op in message), "")


# ---- functions whose `if` tests Python structure ---------------------------------------------------
# NOTE: to_static turns every `if` with a `return` inside into a cond whose branches must return alike.
# A helper that unpacks a Python tuple by its length (PaddleFormers' sft_loss.unpack_logits: 1 or 4
# items) cannot be converted, though it needs no converting: its tests read Python values, never
# tensors. Such a function is left to Python, and capture tries again. A function whose `if` does read a
# tensor then fails in Python with Paddle's own message, which is reported.
STRUCTURE_ERRORS = (
    "different number of return value",
    "don't have the same number of elements",
    "don't have the same nested structure",
)
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\w+)')


def structure_culprit(error: BaseException):
    """The user's function to_static failed to convert for an if/else of unlike returns, or None."""
    text = str(error)
    if type(error).__name__ != "Dygraph2StaticException" or not any(s in text for s in STRUCTURE_ERRORS):
        return None
    frames = [
        (p, int(n), f)
        for p, n, f in _FRAME.findall(text)
        if os.path.isfile(p) and "to_static_tmp" not in p and f"{os.sep}paddle{os.sep}" not in p
    ]
    return _function_at(*frames[-1]) if frames else None


def _function_at(path: str, line: int, name: str):
    path = os.path.realpath(path)
    module = next(
        (m for m in list(sys.modules.values()) if os.path.realpath(getattr(m, "__file__", None) or "") == path), None
    )
    if module is None:
        return None
    found = []
    for value in vars(module).values():
        for fn in [value, *(vars(value).values() if isinstance(value, type) else ())]:
            code = getattr(fn, "__code__", None)
            if (
                code is not None
                and code.co_name == name
                and os.path.realpath(code.co_filename) == path
                and code.co_firstlineno <= line
            ):
                found.append(fn)
    return max(found, key=lambda f: f.__code__.co_firstlineno) if found else None


def qualified(fn) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def leave_to_python(fn) -> str:
    paddle.jit.not_to_static(fn)
    return qualified(fn)
