"""paddle_xla's own attention products for grouped-query attention, found only in programs
generation/gqa_rewrite.py rewrites: a model that repeats each key/value head for its group of
query heads (unsqueeze, expand, reshape) before `q @ k^T` and `p @ v`. Each query head is multiplied with
its group's keys and values as they are, which computes every product the repeated form computes (to
float32 rounding: other kernels sum them) without writing the repeated copy: at 32 rows x 768 cache
slots that copy was 1.8 GB per decode step of a 12-layer model.

The keys and values may come in parts along the slots axis: the cache as it is and the step's new ones,
which the model concatenates (generation/gqa_rewrite.py points the products at the parts). Each
part is multiplied where it lies, so the step reads the cache in place instead of copying it whole into
the concatenation first (600 MB per step at 32 rows x 768 slots in fp32). Paddle-free."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .registry import lowering


def _groups(heads: int, kv_heads: int) -> int:
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"{heads} query heads do not split into groups over {kv_heads} key/value heads")
    return heads // kv_heads


def _per_group_member(x, shared, equation: str):
    """x [B, H, T, N] times `shared` [B, KV, ., .], query head h reading key/value head h // (H // KV):
    [B, H, T, M]. With more than one query (a prompt or a prefill chunk) a group's queries are the rows of
    one product; a decode step's single query takes one einsum `equation` per group member."""
    b, h, t, n = x.shape
    kv = shared.shape[1]
    g = _groups(h, kv)
    if t > 1:
        # NOTE: G x T rows per key head in one product: at T = 64 XLA:CPU runs it in half the time of G
        # products of T rows (1.5 vs 3.0 ms per layer at 768 slots), and each row's sums are the same
        out = jnp.einsum(equation, x.reshape(b, kv, g * t, n), shared)
        return out.reshape(b, h, t, out.shape[-1])
    # NOTE: one product per group member: XLA:CPU runs a batched product with G query rows per key head
    # slower than G products of one row each (measured 131 vs 110 ms for 12 layers at 32 x 768)
    xg = x.reshape(b, kv, g, t, n)
    out = jnp.stack([jnp.einsum(equation, xg[:, :, i], shared) for i in range(g)], axis=2)
    return out.reshape(b, h, t, out.shape[-1])


@lowering("paddle_xla.grouped_scores", amp="white")
def grouped_scores(q, *keys):
    """q [B, H, T, D] times the transposed keys [B, KV, S, D], each key head serving H // KV query heads
    (head h reads key head h // (H // KV)): [B, H, T, S], as q @ repeat(keys)^T. Keys in parts (the slots
    axis cut, [B, KV, S_i, D] each): the parts' scores side by side, as if the keys were concatenated."""
    parts = [_per_group_member(q, k, "bktd,bksd->bkts") for k in keys]
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)


@lowering("paddle_xla.grouped_values", amp="white")
def grouped_values(p, *values):
    """Attention weights p [B, H, T, S] times values [B, KV, S, D] shared as in grouped_scores: [B, H, T, D].
    Values in parts: p's slots cut the same way, each part's product summed."""
    if len(values) == 1:
        return _per_group_member(p, values[0], "bkts,bksd->bktd")
    sizes = [v.shape[2] for v in values]
    if sum(sizes) != p.shape[-1]:
        raise ValueError(f"attention weights over {p.shape[-1]} slots do not match values in parts of {sizes}")
    bounds = np.cumsum(sizes)[:-1]
    cuts = jnp.split(p, [int(b) for b in bounds], axis=-1)
    out = [_per_group_member(c, v, "bkts,bksd->bktd") for c, v in zip(cuts, values)]
    return sum(out[1:], out[0])
