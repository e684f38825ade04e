"""Padding: pd_op.pad (constant, every dimension) and pd_op.pad3d (F.pad on 3-D/4-D/5-D input)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import lowering
from .util import is_static, static_ints, static_scalar

_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _constant_pad(x, pairs, value):
    # NOTE: lax.pad, not jnp.pad: it also takes negative amounts (a crop), as Paddle's kernel does.
    x = jnp.asarray(x)
    v = jnp.asarray(value, dtype=x.dtype).reshape(())
    return lax.pad(x, v, [(int(lo), int(hi), 0) for lo, hi in pairs])


@lowering("pd_op.pad")
def pad(x, pad_value, *, paddings):
    pairs = list(zip(paddings[0::2], paddings[1::2]))
    value = static_scalar(pad_value) if is_static(pad_value) else pad_value
    return _constant_pad(x, pairs, value)


@lowering("pd_op.pad3d")
def pad3d(x, paddings, *, mode="constant", pad_value=0.0, data_format="NCDHW"):
    left, right, top, bottom, front, back = static_ints(paddings)
    spatial = [(front, back), (top, bottom), (left, right)]  # D, H, W
    pairs = [(0, 0), (0, 0)] + spatial if data_format == "NCDHW" else [(0, 0)] + spatial + [(0, 0)]
    if mode == "constant":
        return _constant_pad(x, pairs, pad_value)
    if mode not in _MODES:
        raise ValueError(f"pad3d mode {mode!r} is not one of constant, reflect, replicate, circular")
    return jnp.pad(x, np.asarray(pairs), mode=_MODES[mode])
