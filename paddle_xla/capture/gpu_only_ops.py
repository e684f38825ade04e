"""Paddle ops that a model calls but Paddle's CPU build has no kernel for, built from the ops they are
made of while paddle_xla captures or probes the model on a CPU-only host.

PaddleFormers' default RMSNorm (`fuse_rms_norm=True`) calls `fused_rms_norm_ext`, whose kernel exists
only in Paddle's GPU build: on a CPU host Paddle refuses even to put the op in a static program (its
builder checks the input dtype against the registered kernels), and an eager call fails. Inside
`gpu_only_ops()` the call builds the model's own unfused RMSNorm instead (float32 statistics,
`rsqrt(mean(x^2) + eps) * x * weight`), which is what the fused kernel computes, so the captured
program and its numbers are those of `fuse_rms_norm=False`. The model itself is not touched, and the
op is put back when the block ends. On a GPU build of Paddle nothing is replaced."""

from __future__ import annotations

import contextlib
import threading

import paddle
from paddle import _C_ops

_LOCK = threading.RLock()


def _rms_norm_ext(x, scale, epsilon):
    # NOTE: the order of PaddleFormers' unfused RMSNorm (nn/norm.py), so that the numbers are its numbers;
    # the fused kernel returns y in the weight's dtype and one float32 inverse RMS per row
    h = x.astype("float32")
    inv = paddle.rsqrt(h.pow(2).mean(-1, keepdim=True) + epsilon)
    y = (inv * h).astype(scale.dtype) * scale
    return y, inv.reshape([-1])


_REPLACEMENTS = {"fused_rms_norm_ext": _rms_norm_ext}


def missing_kernels() -> dict:
    """The replacements this Paddle needs: all of them on a CPU-only build, none on a GPU build."""
    return {} if paddle.is_compiled_with_cuda() else dict(_REPLACEMENTS)


@contextlib.contextmanager
def gpu_only_ops():
    """Within the block, the ops Paddle's CPU build lacks are built from their parts (re-entrant)."""
    with _LOCK:
        saved = {name: getattr(_C_ops, name) for name in missing_kernels() if hasattr(_C_ops, name)}
        for name in saved:
            setattr(_C_ops, name, _REPLACEMENTS[name])
        try:
            yield
        finally:
            for name, fn in saved.items():
                setattr(_C_ops, name, fn)
