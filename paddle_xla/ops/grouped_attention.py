"""paddle_xla's own attention products for grouped-query attention, found only in programs
generation/gqa_rewrite.py rewrites: a model that repeats each key/value head for its group of
query heads (unsqueeze, expand, reshape) before `q @ k^T` and `p @ v`. Each query head is multiplied with
its group's keys and values as they are, which computes every product the repeated form computes (to
float32 rounding: other kernels sum them) without writing the repeated copy: at 32 rows x 768 cache
slots that copy was 1.8 GB per decode step of a 12-layer model.

The keys and values may come in parts along the slots axis: the cache as it is and the step's new ones,
which the model concatenates (generation/gqa_rewrite.py points the products at the parts). Each
part is multiplied where it lies, so the step reads the cache in place instead of copying it whole into
the concatenation first (600 MB per step at 32 rows x 768 slots in fp32).

Their sums over the slots run in a fixed order whatever the number of slots: each part is cut into blocks of
SUM_BLOCK slots from its start, each block is summed alone, and the blocks' sums are added one after the
other, the parts' in order (the softmax's normalising sum in slot_softmax, the weighted values in
grouped_values). Empty slots past a part's end add exact zeros. So a row reads the same numbers from a cache
of 64 slots as from one of 512, and a paged engine may run a step over as many cache blocks as its rows
fill (generation/paged.py) and still give each row the tokens a full-cache step gives. Paddle-free."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from .fixed_order import LANES, blocks, fixed_sum, fold
from .registry import lowering

SUM_BLOCK = LANES  # NOTE: slots summed as one block (fixed_order.blocks)


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
    parts = [_one_slot_scores(q, k) if _one_slot(q, k) else _per_group_member(q, k, "bktd,bksd->bkts") for k in keys]
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)


def _one_slot(q, keys) -> bool:
    return q.shape[2] == 1 and keys.shape[2] == 1


def _one_slot_scores(q, keys):
    """A decode step's query [B, H, 1, D] against one key per head [B, KV, 1, D] (the step's own): products
    summed in a fixed order. As a product XLA:CPU ran it as B x KV dot products, whose sums it rounded
    otherwise at 2-8 rows than at 16 or more (a paged step's row buckets, fixed_order.py)."""
    b, h, _, d = q.shape
    kv = keys.shape[1]
    # NOTE: in float32, as XLA:CPU's dot accumulates a half-precision product
    products = q.reshape(b, kv, _groups(h, kv), d).astype(jnp.float32) * keys.reshape(b, kv, 1, d).astype(jnp.float32)
    return fixed_sum(products).astype(jnp.result_type(q, keys)).reshape(b, h, 1, 1)


@lowering("paddle_xla.grouped_values", amp="white")
def grouped_values(p, *values):
    """Attention weights p [B, H, T, S] times values [B, KV, S, D] shared as in grouped_scores: [B, H, T, D].
    Values in parts: p's slots cut the same way. The products over the slots are summed block by block in
    a fixed order (module docstring)."""
    sizes = [v.shape[2] for v in values]
    if sum(sizes) != p.shape[-1]:
        raise ValueError(f"attention weights over {p.shape[-1]} slots do not match values in parts of {sizes}")
    partials = [_block_products(c, v) for c, v in zip(_cut(p, sizes), values)]
    return fold(jnp.concatenate(partials, axis=-2), axis=-2)


@lowering("paddle_xla.slot_softmax", amp="black")
def slot_softmax(x, *values):
    """softmax(x) over its last axis, the slots that the `values` parts ([B, KV, S_i, D], read for their sizes
    only) cut: the normalising sum taken block by block in a fixed order (module docstring). The maximum
    subtracted first is exact in any order."""
    top = lax.stop_gradient(jnp.max(x, axis=-1, keepdims=True))
    # NOTE: exp on the blocks, not on x: XLA:CPU's exp rounds a value in the vector body of a loop and one in
    # its scalar remainder differently (1 ulp), and which a slot falls in depended on the cache's length
    exps = [jnp.exp(blocks(part, -jnp.inf) - top[..., None]) for part in _cut(x, [v.shape[2] for v in values])]
    total = fold(jnp.concatenate([fold(e, axis=-1) for e in exps], axis=-1), axis=-1)
    parts = [(e / total[..., None, None]).reshape(*e.shape[:-2], -1)[..., : v.shape[2]] for e, v in zip(exps, values)]
    return jnp.concatenate(parts, axis=-1)


def _cut(x, sizes):
    bounds = np.cumsum(sizes)[:-1]
    return jnp.split(x, [int(b) for b in bounds], axis=-1)


def _block_products(p, values):
    """p [B, H, T, S] times values [B, KV, S, D], one product per block of slots: [B, H, T, blocks, D]."""
    b, h, t, _ = p.shape
    kv, d = values.shape[1], values.shape[3]
    g = _groups(h, kv)
    pb = blocks(p, 0.0)  # [B, H, T, n, c]
    n = pb.shape[-2]
    vb = jnp.pad(values, [(0, 0), (0, 0), (0, n * SUM_BLOCK - values.shape[2]), (0, 0)])
    vb = vb.reshape(b, kv, 1, n, SUM_BLOCK, d)
    pb = pb.reshape(b, kv, g, t, n, SUM_BLOCK)
    if t == 1:
        # NOTE: a decode step's products as multiplies and a chain of adds over the block: XLA:CPU turns a
        # product over a single block (a cache of <= 16 slots) into another kernel than one over several,
        # which rounded otherwise
        out = fold(pb[:, :, :, 0, :, :, None] * vb, axis=-2)[:, :, :, None]
    else:
        out = jnp.einsum("bkgtnc,bkxncd->bkgtnd", pb, vb)
    return out.reshape(b, h, t, n, d)
