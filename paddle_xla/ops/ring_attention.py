"""paddle_xla.ring_attention: attention over a sequence split across devices, as a ring.

Found only in programs parallel/ring_rewrite.py rewrites under Strategy(sequence=N): the model's own
`softmax(epilogue(q @ k^T)) @ v`, the epilogue (its scaling, mask and casts) held in the op's sub-block.
Each of the N devices holds its block of the queries, keys and values. In N steps the key/value blocks
travel round the ring (ppermute to the next device), and each device folds the block it holds into a
running softmax (the largest score so far, the sum of exponentials, the weighted values). The backward
pass goes round the ring again, recomputing each block's scores from the saved log-sum-exp, the key and
value gradients travelling with their blocks until they are home. So a device keeps [T/N, T/N] scores
at a time and O(T/N) per layer for the backward pass, where gathering the keys (GSPMD's way) keeps
[T/N, T] scores per layer. The same numbers as the unsplit attention, to float32 rounding (the sums
are taken in another order).

Where the split does not apply (one device, a sequence the devices do not divide, keys of another
length than the queries) the op computes the attention as the program wrote it. Paddle-free."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from .registry import lowering


@lowering("paddle_xla.ring_attention", kind="control")
def ring_attention(interp, op, env, q, k, v, *outer, axis, size, mesh, scores, epilogue_out):
    epilogue = _epilogue(interp, op, scores, epilogue_out)
    products = _Products(interp.half, jnp.result_type(q.dtype, k.dtype))
    # NOTE: keys and values of one batch row shared by every row (the model's repeat broadcast a batch of
    # 1 with its heads): each row gets them, and their gradients sum back over the rows
    k, v = (
        jnp.broadcast_to(t, q.shape[:1] + t.shape[1:]) if t.ndim == q.ndim and t.shape[0] == 1 else t for t in (k, v)
    )
    length = q.shape[2] if q.ndim == 4 else 0
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        return _as_written(q, k, v, outer, epilogue, products)
    if size == 1 or length % size or k.shape[2] != length or v.shape[2] != length:
        return _whole(q, k, v, outer, epilogue, products)
    here = jax.sharding.get_abstract_mesh()
    split = P(None, None, axis, None)
    specs = tuple(_outer_spec(x, length, axis) for x in outer)
    ring = _ring(axis, size, length, epilogue, products)
    mapped = jax.shard_map(
        lambda q, k, v, *outer: ring(q, k, v, tuple(outer)),
        mesh=mesh if here.empty else here,
        in_specs=(split, split, split, *specs),
        out_specs=split,
        axis_names={axis},
        check_vma=False,
    )
    return mapped(q, k, v, *outer)


class _Products:
    """The attention products as Paddle AMP runs them: under bf16/fp16 both operands in half and a float32
    result (matmul is a white-list op); otherwise in the operands' own type. Keys and values may have fewer
    heads than the queries (grouped-query attention: query head h reads key/value head h // (H // KV));
    every product is written per group, [B, KV, G, ...], which is the plain one when KV = H."""

    def __init__(self, half, dtype):
        self.half, self.out = half, jnp.float32 if half is not None else dtype

    def _cast(self, a, b):
        # NOTE: float64 keeps its type under AMP, as the captured matmul's does (half.cast_floats)
        if self.half is None or jnp.float64 in (a.dtype, b.dtype):
            return a, b
        return a.astype(self.half), b.astype(self.half)

    def _dot(self, equation, a, b):
        a, b = self._cast(a, b)
        out = jnp.promote_types(self.out, jnp.result_type(a, b)) if jnp.float64 in (a.dtype, b.dtype) else self.out
        return jnp.einsum(equation, a, b, preferred_element_type=out)

    def matmul(self, a, b):
        a, b = self._cast(a, b)
        return jnp.matmul(a, b, preferred_element_type=self.out if self.half is not None else None)

    def _grouped(self, equation: str, a, b, kv: int, heads_out: bool = True):
        """The product per group when there are fewer key/value heads than query heads, else the plain one
        (a size-1 group axis costs XLA:CPU copies: measured 4.4 -> 5.5 MiB of temporaries)."""
        h = a.shape[1]
        if kv == h:
            return self._dot(equation.replace("g", ""), a, b)
        split = lambda x: x.reshape((x.shape[0], kv, h // kv) + x.shape[2:]) if x.shape[1] == h else x  # noqa: E731
        out = self._dot(equation, split(a), split(b))
        return out.reshape((out.shape[0], h) + out.shape[3:]) if heads_out else out

    def scores(self, q, k):  # [B, H, T, D] x [B, KV, S, D] -> [B, H, T, S]
        return self._grouped("bkgqd,bksd->bkgqs", q, k, k.shape[1])

    def values(self, p, v):  # [B, H, T, S] x [B, KV, S, D] -> [B, H, T, D]
        return self._grouped("bkgqs,bksd->bkgqd", p, v, v.shape[1])

    def key_grad(self, ds, q, kv: int):  # [B, H, T, S] x [B, H, T, D] -> [B, KV, S, D], summed over groups
        return self._grouped("bkgqs,bkgqd->bksd", ds, q, kv, heads_out=False)


def _epilogue(interp, op, scores: int, out: int):
    """(scores, outer values) -> the softmax's input, through the model's own ops (the op's sub-block)."""
    (block,) = op.blocks
    names = op.inputs[3:]

    def run(s, outer):
        local = {scores: s, **dict(zip(names, outer))}
        interp.run_block(block, local)
        return local[out]

    return run


def _as_written(q, k, v, outer, epilogue, products):
    """Attention of another rank than [B, H, T, D] (heads folded into the batch, one head): the program's own
    products, left to GSPMD."""
    x = epilogue(products.matmul(q, jnp.swapaxes(k, -1, -2)), tuple(outer))
    p = jax.nn.softmax(x.astype(jnp.promote_types(x.dtype, jnp.float32)), axis=-1)
    return products.matmul(p, v)


def _whole(q, k, v, outer, epilogue, products):
    x = epilogue(products.scores(q, k), tuple(outer))
    p = jax.nn.softmax(x.astype(jnp.promote_types(x.dtype, jnp.float32)), axis=-1)
    return products.values(p, v)


def _outer_spec(x, length: int, axis: str):
    """An epilogue operand broadcasts against the scores [B, H, T, T]: its next-to-last dimension, when it
    has the queries' length, is split with them (a mask's rows); the rest is whole on every device."""
    if getattr(x, "ndim", 0) >= 2 and x.shape[-2] == length and length > 1:
        return P(*([None] * (x.ndim - 2)), axis, None)
    return P()


def _key_block(outer, source, block: int, length: int):
    """Each operand's columns for the key block from device `source` (those with the keys' length)."""
    return tuple(
        jax.lax.dynamic_slice_in_dim(x, source * block, block, axis=x.ndim - 1) if _by_key(x, length) else x
        for x in outer
    )


def _by_key(x, length: int) -> bool:
    return getattr(x, "ndim", 0) >= 1 and x.shape[-1] == length and length > 1


def _ring(axis: str, n: int, length: int, epilogue, products):
    """The per-device ring (inside shard_map over `axis`), with its own backward pass."""
    block = length // n
    forward_perm = [(i, (i + 1) % n) for i in range(n)]

    def rotate(*xs):
        return tuple(jax.lax.ppermute(x, axis, forward_perm) for x in xs)

    def source(j):
        return (jax.lax.axis_index(axis) - j) % n

    def scores_of(q, k, outer, j):
        return products.scores(q, k), _key_block(outer, source(j), block, length)

    def forward(q, k, v, outer):
        acc = jnp.promote_types(products.out, jnp.float32)
        o = jnp.zeros(q.shape, acc)
        m = jnp.full(q.shape[:3] + (1,), -jnp.inf, acc)
        total = jnp.zeros(q.shape[:3] + (1,), acc)

        def step(j, carry):
            o, m, total, k, v = carry
            s, ex = scores_of(q, k, outer, j)
            x = epilogue(s, ex).astype(acc)
            m_new = jnp.maximum(m, x.max(-1, keepdims=True))
            # NOTE: a row whose scores are all -inf so far: exp(-inf - -inf) would be nan
            safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
            e = jnp.exp(x - safe)
            scale = jnp.exp(m - safe)
            o = o * scale + products.values(e, v).astype(acc)
            return (o, m_new, total * scale + e.sum(-1, keepdims=True), *rotate(k, v))

        o, m, total, _, _ = jax.lax.fori_loop(0, n, step, (o, m, total, k, v))
        out = o / total
        lse = jnp.where(jnp.isfinite(m), m, 0.0) + jnp.log(total)
        return out.astype(products.out), (q, k, v, outer, out, lse)

    def backward(res, d_out):
        q, k, v, outer, out, lse = res
        acc = lse.dtype
        d_out = d_out.astype(acc)
        rowdot = jnp.sum(d_out * out, -1, keepdims=True)
        zeros = lambda x: jnp.zeros(x.shape, acc)  # noqa: E731
        d_outer = tuple(zeros(x) if _is_float(x) else None for x in outer)

        def step(j, carry):
            dq, k, v, dk, dv, d_outer = carry
            s, ex = scores_of(q, k, outer, j)
            x, pull = jax.vjp(epilogue, s, ex)
            p = jnp.exp(x.astype(acc) - lse)
            dv = dv + products.key_grad(p, d_out, v.shape[1]).astype(acc)
            dp = products.scores(d_out, v).astype(acc)
            ds, d_ex = pull((p * (dp - rowdot)).astype(x.dtype))
            dq = dq + products.values(ds, k).astype(acc)
            dk = dk + products.key_grad(ds, q, k.shape[1]).astype(acc)
            d_outer = _add_outer(d_outer, d_ex, outer, source(j), block, length)
            k, v, dk, dv = rotate(k, v, dk, dv)
            return dq, k, v, dk, dv, d_outer

        dq, _, _, dk, dv, d_outer = jax.lax.fori_loop(0, n, step, (zeros(q), k, v, zeros(k), zeros(v), d_outer))
        return (
            dq.astype(q.dtype),
            dk.astype(k.dtype),
            dv.astype(v.dtype),
            tuple(_cotangent(x, d) for x, d in zip(outer, d_outer)),
        )

    @jax.custom_vjp
    def ring(q, k, v, outer):
        return forward(q, k, v, outer)[0]

    ring.defvjp(forward, backward)
    return ring


def _is_float(x) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.floating)


def _add_outer(total, d_ex, outer, source, block, length):
    """The epilogue operands' gradients, each key block's into its columns."""
    out = []
    for acc, d, x in zip(total, d_ex, outer):
        if acc is None:
            out.append(None)
        elif _by_key(x, length):
            start = source * block
            cur = jax.lax.dynamic_slice_in_dim(acc, start, block, axis=acc.ndim - 1)
            out.append(jax.lax.dynamic_update_slice_in_dim(acc, cur + d.astype(acc.dtype), start, axis=acc.ndim - 1))
        else:
            out.append(acc + d.astype(acc.dtype))
    return tuple(out)


def _cotangent(x, d):
    if d is None:
        return np.zeros(jnp.shape(x), jax.dtypes.float0)
    return d.astype(jnp.result_type(x))
