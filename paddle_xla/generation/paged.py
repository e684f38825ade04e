"""The device side of a paged KV cache: a pool of fixed-size blocks, and decode steps sized to the work.

The pool holds, per layer, keys and values [blocks, KV heads, block_size, head dim]. A sequence's cache is
the blocks its block table lists (generation/blocks.py keeps the tables on the host), so a sequence holds
as much cache as its tokens fill, not `max_length` slots. Block 0 is the null block: padding entries of a
table point at it, and nothing is written into it.

A decode step runs for a *bucket*: R rows (sequence slots) and N blocks per row. It gathers each row's first
N blocks into a [R, H, N * block_size, D] view, runs the generator's decode program (captured with symbolic
rows and slots, capture/causal_lm.py) on it, and writes each live row's new keys and values into the slot
after its last. So a step reads the blocks its rows have filled, up to the bucket, and computes R rows:
its cost follows the work. The attention's sums run in a fixed block order (ops/grouped_attention.py), so
empty slots past a row's end do not change its numbers.

A prompt is prefilled as continuous.py prefills one (the batch-1 programs, into a batch-1 slots view of its
own), and its view's slots are then written into its blocks (`commit`). Per-sequence decode state (last
token, position, sampling arguments, key, tokens made) lives in [M + 1] arrays, M the engine's sequence
slots; slot M is a dummy that padding rows of a bucket read and write. Paddle-free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from . import row_logits as R
from . import slots as SL


class Seqs(NamedTuple):
    """Every sequence slot's decode state, [M + 1] along axis 0 (the last slot a padding row's dummy)."""

    length: jax.Array  # int32: tokens whose K/V are in the sequence's blocks
    token: jax.Array  # int64: its last token, not yet in the cache
    position: jax.Array  # int64: that token's position id
    live: jax.Array  # bool: it goes on
    t: jax.Array  # int32: tokens generated
    limit: jax.Array  # int32: max_new_tokens
    scores: jax.Array  # float32: the running mean of its score terms
    seen: jax.Array  # [M + 1, V] bool
    keys: jax.Array  # [M + 1, 2] uint32
    params: R.RowParams
    # NOTE: the last step's K/V, written into the pool at the start of the next step (step() says why)
    pending: jax.Array  # [M + 1, 2L, H, D]
    pending_on: jax.Array  # bool: they go in (the sequence was live when it made them), at slot length - 1


class Paged(NamedTuple):
    pool: tuple  # 2L x [blocks, H, block_size, D]: layer i's keys at 2i, its values at 2i + 1
    seqs: Seqs


def empty(layers2: int, blocks: int, heads: int, block_size: int, dim: int, dtype, seqs: int, vocab: int) -> Paged:
    n = seqs + 1

    def i32():
        return jnp.zeros(n, jnp.int32)  # NOTE: one buffer per field: the state is donated

    pool = tuple(jnp.zeros((blocks, heads, block_size, dim), dtype) for _ in range(layers2))
    return Paged(
        pool,
        Seqs(
            i32(),
            jnp.zeros(n, jnp.int64),
            jnp.zeros(n, jnp.int64),
            jnp.zeros(n, bool),
            i32(),
            i32(),
            jnp.zeros(n, jnp.float32),
            jnp.zeros((n, vocab), bool),
            jnp.zeros((n, 2), jnp.uint32),
            R.row_params(n, vocab),
            jnp.zeros((n, layers2, heads, dim), dtype),
            jnp.zeros(n, bool),
        ),
    )


def _rows(seqs: Seqs, rows) -> Seqs:
    return jax.tree.map(lambda a: a[rows], seqs)


def _put_rows(seqs: Seqs, rows, sub: Seqs) -> Seqs:
    # NOTE: padding rows all name the dummy slot; whichever write lands there is never read as a sequence's
    return jax.tree.map(lambda a, s: a.at[rows].set(s.astype(a.dtype)), seqs, sub)


def gathered(pool: tuple, tables) -> jax.Array:
    """The rows' first N blocks (tables [R, N]) as the decode program's past [2L, R, H, N * block_size, D]."""
    r, n = tables.shape

    def view(layer):
        blocks = layer[tables]  # [R, N, H, bs, D]
        _, _, h, bs, d = blocks.shape
        return jnp.transpose(blocks, (0, 2, 1, 3, 4)).reshape(r, h, n * bs, d)

    return jnp.stack([view(layer) for layer in pool])


def step(decode: Callable, weights, state: Paged, rows, tables, eos_ids: tuple[int, ...], pad: int):
    """One decode step of the bucket's rows (rows [R] sequence slots, tables [R, N] their first N blocks).
    Returns (state, the tokens the rows made [R], NO_TOKEN where a row made none, their TokenScores [R]).

    The K/V a step makes go into the pool at the start of the next step, not at its end: then nothing reads
    the pool before the write, and XLA updates it in place. Written after the decode, the pool was read (by
    the gather) and updated in one loop body, and XLA:CPU copied all of it twice per step."""
    s = _rows(state.seqs, rows)
    pool = _written(state.pool, tables, s.length - 1, s.pending_on, jnp.moveaxis(s.pending, 1, 0))
    logits, new = _decoded(decode, weights, pool, s, tables)
    split = jax.vmap(jax.random.split)(s.keys)
    token, term = R.choose(logits, s.params, s.seen, s.t, split[:, 1], eos_ids)
    token_scores = R.token_scores(logits, token, s.params.logprobs & s.live)
    token, scores, live = SL.finish(token, term, s.scores, s.live, s.t, s.limit, eos_ids, pad, s.params.ignore_eos)
    made = jnp.where(s.live, token, SL.NO_TOKEN)
    after = s._replace(
        length=s.length + s.live,
        token=token.astype(s.token.dtype),
        position=s.position + s.live,
        live=live,
        t=s.t + s.live,
        scores=scores,
        seen=jnp.where(s.live[:, None], R.mark_seen(s.seen, token), s.seen),
        keys=split[:, 0],
        pending=jnp.moveaxis(new, 1, 0).astype(s.pending.dtype),
        pending_on=s.live,
    )
    return Paged(pool, _put_rows(state.seqs, rows, after)), made, token_scores


def _decoded(decode: Callable, weights, pool: tuple, s: Seqs, tables):
    """The decode program on the rows' last tokens over their first N blocks: (logits, new K/V)."""
    r, n = tables.shape
    filled = (jnp.arange(n * pool[0].shape[2])[None, :] < s.length[:, None]).astype(jnp.int64)
    mask = jnp.concatenate([filled, jnp.ones((r, 1), jnp.int64)], axis=-1)
    return decode(weights, s.token[:, None], mask, s.position[:, None], gathered(pool, tables))


def row_numbers(decode: Callable, weights, state: Paged, rows, tables, eos_ids: tuple[int, ...]):
    """What a step computes for its rows before it writes anything: (logits, new K/V, tokens, score terms).
    A row bucket keeps a row's numbers when these are the full bucket's rows' to the bit (paged_engine.py)."""
    s = _rows(state.seqs, rows)
    logits, new = _decoded(decode, weights, state.pool, s, tables)
    split = jax.vmap(jax.random.split)(s.keys)
    token, term = R.choose(logits, s.params, s.seen, s.t, split[:, 1], eos_ids)
    return logits, new, token, term


def _written(pool: tuple, tables, slot, on, new) -> tuple:
    """The pool with each row's K/V (new [2L, R, H, D]) in its cache slot `slot` where `on`."""
    blocks, bs = pool[0].shape[0], pool[0].shape[2]
    index = jnp.clip(slot // bs, 0, tables.shape[1] - 1)
    at = jnp.take_along_axis(tables, index[:, None], axis=1)[:, 0]
    at = jnp.where(on, at, blocks)  # NOTE: out of range: dropped
    return tuple(
        layer.at[at, :, slot % bs].set(new[i].astype(layer.dtype), mode="drop") for i, layer in enumerate(pool)
    )


def run(
    decode: Callable,
    weights,
    state: Paged,
    rows,
    tables,
    steps,
    allowed,
    chunk: int,
    eos_ids: tuple[int, ...],
    pad: int,
):
    """Up to `steps` (a traced int32, at most `chunk`) decode steps of the bucket's rows, fewer once none is
    live; allowed [R, words(V)]: the rows' token masks (token_masks.py) from now on. Returns (state, tokens
    [R, chunk]: what each row made at each step, NO_TOKEN where it made none, and their TokenScores [R,
    chunk]). The tables must hold the blocks of every slot the chunk writes (blocks.py reserves a sequence's
    blocks up front). A constrained row's mask holds for one token, so a chunk that carries one runs one step
    (paged_engine.py), in the same program."""
    params = state.seqs.params
    params = params._replace(allowed=params.allowed.at[rows].set(allowed))
    state = state._replace(seqs=state.seqs._replace(params=params))
    out = jnp.full((rows.shape[0], chunk), SL.NO_TOKEN, jnp.int32)
    scores = R.no_scores((rows.shape[0], chunk), state.seqs.seen.shape[1])

    def more(c):
        i, s, _, _ = c
        return (i < steps) & jnp.any(s.seqs.live[rows])

    def body(c):
        i, s, out, scores = c
        s, made, step_scores = step(decode, weights, s, rows, tables, eos_ids, pad)
        return i + 1, s, SL.at_step(out, made, i), SL.at_step(scores, step_scores, i)

    _, state, out, scores = lax.while_loop(more, body, (jnp.asarray(0, jnp.int32), state, out, scores))
    return state, out, scores


def prefix_view(pool: tuple, table, hit, prefix_ids, slots: int, vocab: int) -> SL.Slots:
    """A batch-1 slots view of `slots` slots whose first `hit` hold the K/V of the cached blocks `table` [N]
    lists (a prefix-cache hit), ready for the extend program's chunks of the rest of the prompt (fresh False):
    valid and cursor cover the hit, seen holds prefix_ids [1, slots] (the prompt's first `hit` ids, then
    repeats of its first)."""
    past = gathered(pool, table[None, :])[:, :, :, :slots]
    filled = jnp.arange(slots) < hit
    view = SL.empty((len(pool), 1, pool[0].shape[1], slots, pool[0].shape[3]), pool[0].dtype, vocab)
    return view._replace(
        past=tuple(jnp.where(filled[None, None, :, None], layer, 0).astype(pool[0].dtype) for layer in past),
        valid=filled[None, :].astype(jnp.int64),
        cursor=jnp.reshape(hit, (1,)).astype(jnp.int32),
        seen=R.seen_tokens(prefix_ids, vocab),
    )


def commit(state: Paged, seq, table, view: SL.Slots, start=0) -> Paged:
    """A prefilled batch-1 slots view (continuous.py's prefill of one prompt, `view.cursor` slots filled) put
    into sequence slot `seq`: its filled slots from `start` on (those before: prefix-cache hits, shared, never
    written) into the blocks `table` [N] lists, its state into the slot."""
    bs = state.pool[0].shape[2]
    width = view.valid.shape[1]
    slot = jnp.arange(width)
    keep = (slot >= start) & (slot < view.cursor[0])
    at = jnp.where(keep, table[jnp.minimum(slot // bs, table.shape[0] - 1)], state.pool[0].shape[0])
    pool = tuple(
        layer.at[at, :, slot % bs].set(jnp.swapaxes(past[0], 0, 1).astype(layer.dtype), mode="drop")
        for layer, past in zip(state.pool, view.past)
    )
    one = Seqs(
        view.cursor,
        view.token,
        view.position,
        view.live,
        view.t,
        view.limit,
        view.scores,
        view.seen,
        view.keys,
        view.params,
        jnp.zeros((1,) + state.seqs.pending.shape[1:], state.seqs.pending.dtype),
        jnp.zeros(1, bool),
    )
    return Paged(pool, _put_rows(state.seqs, jnp.reshape(seq, (1,)), one))


def free(state: Paged, seq) -> Paged:
    """End sequence slot `seq` now (cancelled, timed out): no step advances it again."""
    seqs = state.seqs
    return Paged(state.pool, seqs._replace(live=seqs.live.at[seq].set(False)))
