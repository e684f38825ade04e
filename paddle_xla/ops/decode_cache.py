"""paddle_xla's own ops, found only in programs generation/derive.py derives from a plain decoder's
forward (a KV cache for a model that has no cache API). Paddle has no such ops; their numbers are
tested through the derived programs against the model's own forward (tests/generation). Paddle-free."""

from __future__ import annotations

import jax.numpy as jnp

from .registry import lowering

# NOTE: the lowest finite float, not -inf: a masked key's exp() is exactly 0 either way, and a query
# row whose keys are all masked (a padding row, never read) stays finite
_MASKED = {
    jnp.dtype(jnp.float32): jnp.finfo(jnp.float32).min,
    jnp.dtype(jnp.bfloat16): jnp.finfo(jnp.bfloat16).min,
    jnp.dtype(jnp.float16): jnp.finfo(jnp.float16).min,
}


@lowering("paddle_xla.cache_entry")
def cache_entry(past, y, *, entry):
    """Cache entry `entry` of `past` [M, B, H, S, D] in the dtype of the step's own attention operand y
    [B, H, 1, D] (keys or values), which the derived step appends to it (generation/derive.py)."""
    return past[entry].astype(y.dtype)


@lowering("paddle_xla.cache_concat")
def cache_concat(y, past, *, entry):
    """An attention operand [B, H, 1, D] after cache entry `entry` of `past` [M, B, H, S, D]: the op artifacts
    written before the derived cache became cache_entry + concat still hold (their Graphs lower again)."""
    return jnp.concatenate([past[entry].astype(y.dtype), y], axis=-2)


@lowering("paddle_xla.mask_keys")
def mask_keys(scores, mask):
    """Attention scores [..., queries, keys] with the keys whose mask [B, keys] is 0 at the lowest value."""
    shape = (mask.shape[0],) + (1,) * (scores.ndim - 2) + (mask.shape[-1],)
    return jnp.where(mask.reshape(shape) != 0, scores, _MASKED[jnp.dtype(scores.dtype)])


@lowering("paddle_xla.positions")
def positions(arange, position_ids):
    """The positions a model computed as arange(length), replaced by the true ones (row 0's: the rows of a
    plain decoder's call share their positions)."""
    return position_ids[0].reshape(arange.shape).astype(arange.dtype)


@lowering("paddle_xla.last_position")
def last_position(logits):
    return logits[:, -1]


@lowering("paddle_xla.stack_cache")
def stack_cache(*operands, new_only):
    """The cached attention operands, stacked [M, B, H, S, D]; `new_only`: the last position's [M, B, H, D]."""
    return jnp.stack([y[:, :, -1] if new_only else y for y in operands])
