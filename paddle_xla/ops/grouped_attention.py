"""paddle_xla's own attention products for grouped-query attention, found only in programs
generation/grouped_attention.py rewrites: a model that repeats each key/value head for its group of
query heads (unsqueeze, expand, reshape) before `q @ k^T` and `p @ v`. Each query head is multiplied with
its group's keys and values as they are, which computes every product the repeated form computes (to
float32 rounding: other kernels sum them) without writing the repeated copy: at 32 rows x 768 cache
slots that copy was 1.8 GB per decode step of a 12-layer model. Paddle-free."""
from __future__ import annotations

import jax.numpy as jnp

from .registry import lowering


def _groups(heads: int, kv_heads: int) -> int:
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"{heads} query heads do not split into groups over {kv_heads} key/value heads")
    return heads // kv_heads


def _per_group_member(x, shared, equation: str):
    """x [B, H, T, N] times `shared` [B, KV, ., .], query head h reading key/value head h // (H // KV): one
    einsum `equation` per group member, stacked back into [B, H, T, M]."""
    b, h, t, n = x.shape
    kv = shared.shape[1]
    g = _groups(h, kv)
    xg = x.reshape(b, kv, g, t, n)
    # NOTE: one product per group member: XLA:CPU runs a batched product with G query rows per key head
    # slower than G products of one row each (measured 131 vs 110 ms for 12 layers at 32 x 768)
    out = jnp.stack([jnp.einsum(equation, xg[:, :, i], shared) for i in range(g)], axis=2)
    return out.reshape(b, h, t, out.shape[-1])


@lowering("paddle_xla.grouped_scores", amp="white")
def grouped_scores(q, keys):
    """q [B, H, T, D] times the transposed keys [B, KV, S, D], each key head serving H // KV query heads
    (head h reads key head h // (H // KV)): [B, H, T, S], as q @ repeat(keys)^T."""
    return _per_group_member(q, keys, "bktd,bksd->bkts")


@lowering("paddle_xla.grouped_values", amp="white")
def grouped_values(p, values):
    """Attention weights p [B, H, T, S] times values [B, KV, S, D] shared as in grouped_scores: [B, H, T, D]."""
    return _per_group_member(p, values, "bkts,bksd->bktd")
