"""Speculative rounds over a paged KV cache (generation/paged.py): a server's bucket of rows guesses k tokens
each by prompt lookup, and the target verifies them in one step over k + 1 positions through the rows' block
tables.

A round is rounds.py's, on a paged state: the verify program (the extend step over k + 1 tokens with every
position's logits, captured with symbolic rows and slots) reads each row's first N blocks (paged.gathered)
with the row's last token and its guesses; rounds.accepted keeps the agreeing prefix and the target's own
next token, with the plain step's processing at each position. The kept positions' K/V go into the row's
blocks at the start of the next round (the slots after its length), as paged.step writes a decode step's;
rejected positions' are never written, and the length moves by the kept count only. A row without a guess
takes the plain decode step's numbers (rounds.either: the step runs only where such a row is live), so a
row's numbers never depend on what its company guessed.

Per sequence slot the rounds keep `Side`: the row's tokens (prompt lookup's history) and the K/V still to be
written. The tables must hold every slot a chunk of rounds may keep (blocks.py reserves a request's blocks
up front: what a row keeps never passes its prompt and max_new_tokens). Paddle-free."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from .. import paged as PG
from .. import row_logits as R
from .. import slots as SL
from . import lookup
from . import rounds as RD

OFF = 2**30  # a pending position's slot where it is not written (rejected, or no round has run)


class Side(NamedTuple):
    """Every sequence slot's speculation state, [M + 1] along axis 0, as paged.Seqs."""

    history: lookup.History  # [M + 1, W]: prompt, then every token made
    pending: tuple  # 2L x [M + 1, k + 1, H, D]: the last round's K/V
    pending_at: jax.Array  # [M + 1, k + 1] int32: the cache slot each goes into (OFF: it does not)


class Lookup(NamedTuple):
    """The round's static shape: k guesses by prompt lookup of the newest longest..shortest tokens."""

    k: int
    longest: int
    shortest: int
    max_position: int  # the model's max_length: a guess's position id stays below it


def empty_side(layers2: int, heads: int, dim: int, dtype, seqs: int, k: int, width: int) -> Side:
    n = seqs + 1
    history = lookup.History(jnp.zeros((n, width), jnp.int32), jnp.zeros(n, jnp.int32))
    pending = tuple(jnp.zeros((n, k + 1, heads, dim), dtype) for _ in range(layers2))
    return Side(history, pending, jnp.full((n, k + 1), OFF, jnp.int32))


def begun(side: Side, seq, tokens, length) -> Side:
    """Sequence slot `seq` holds a new request: its history the prompt and first token (tokens [W], `length`
    of them real), nothing pending."""
    history = lookup.History(side.history.tokens.at[seq].set(tokens), side.history.length.at[seq].set(length))
    return Side(history, side.pending, side.pending_at.at[seq].set(OFF))


def _written(pool: tuple, tables, at, new: tuple) -> tuple:
    """The pool with each row's pending K/V (new: 2L x [R, k + 1, H, D]) in the cache slots `at` [R, k + 1]."""
    blocks, bs = pool[0].shape[0], pool[0].shape[2]
    index = jnp.clip(at // bs, 0, tables.shape[1] - 1)
    block = jnp.where(at < OFF, jnp.take_along_axis(tables, index, axis=1), blocks)  # NOTE: out of range: dropped
    return tuple(layer.at[block, :, at % bs].set(v.astype(layer.dtype), mode="drop") for layer, v in zip(pool, new))


def _verified(verify: Callable, decode: Callable, weights, pool: tuple, s: PG.Seqs, tables, guesses, shape: Lookup):
    """rounds.checked over each row's first N blocks: (logits [R, k + 1, V] float32, K/V 2L x [R, k + 1, H, D])."""
    filled = (jnp.arange(tables.shape[1] * pool[0].shape[2])[None, :] < s.length[:, None]).astype(jnp.int64)
    past = PG.gathered(pool, tables)
    # NOTE: a kept input's position is below max_length; a later guess's is clamped (it is never kept)
    last, vocab = shape.max_position - 1, s.seen.shape[1]
    target = RD.Target(verify, decode)
    return RD.checked(target, weights, s.token, guesses, filled, s.position, last, past, s.live, vocab)


def _as_slots(s: PG.Seqs) -> SL.Slots:
    """A paged row's state as rounds.accepted reads it (no cache: the cursor is the row's length)."""
    unused: Any = None  # NOTE: the cache and pending fields, which accepted never reads
    return SL.Slots((), unused, s.length, s.token, s.position, s.live, s.t, s.limit, s.scores, s.seen, s.keys,
                    s.params, unused, unused, unused, unused)  # fmt: skip


def _scores(logits, made, kept, wanted) -> R.TokenScores:
    """Each position's TokenScores [R, k + 1] (zeros where it made no token or the row wants none)."""
    r, width, vocab = logits.shape
    # NOTE: one call over every position (one top-k, not k + 1: each is a sort's worth of compile time)
    flat = R.token_scores(
        logits.reshape(r * width, vocab), jnp.maximum(made, 0).reshape(-1), (wanted[:, None] & kept).reshape(-1)
    )
    return jax.tree.map(lambda a: a.reshape((r, width) + a.shape[1:]), flat)


def one_round(verify, decode, weights, state: PG.Paged, side: Side, rows, tables, guess_on, shape: Lookup, eos, pad):
    """One round of the bucket's rows (rows [R] sequence slots, tables [R, N], guess_on [R]: rows that guess).
    Returns (state, side, made [R, k + 1] (NO_TOKEN where none), TokenScores [R, k + 1], counts [3]: live rows,
    guesses made, guesses kept)."""
    k = shape.k
    s = PG._rows(state.seqs, rows)
    history = lookup.History(side.history.tokens[rows], side.history.length[rows])
    pool = _written(state.pool, tables, side.pending_at[rows], tuple(p[rows] for p in side.pending))
    guesses = lookup.guesses(history, k, shape.longest, shape.shortest)
    guesses = jnp.where((s.live & guess_on)[:, None], guesses, lookup.NONE)
    keys = jax.vmap(lambda key: jax.random.split(key, 2 * k + 2))(s.keys)
    logits, kv = _verified(verify, decode, weights, pool, s, tables, guesses, shape)
    after, made, kept = RD.accepted(_as_slots(s), logits, guesses, None, keys[:, k + 1 :], eos, pad)
    scores = _scores(logits, made, kept, s.params.logprobs & s.live)
    at = jnp.where(kept, s.length[:, None] + jnp.arange(k + 1), OFF).astype(jnp.int32)
    n = jnp.sum(kept, axis=1).astype(jnp.int32)
    seqs = s._replace(
        length=after.cursor,
        token=after.token,
        position=after.position,
        live=after.live,
        t=after.t,
        scores=after.scores,
        seen=after.seen,
        keys=keys[:, 0],
    )
    history = lookup.appended(history, made)
    side = Side(
        lookup.History(
            side.history.tokens.at[rows].set(history.tokens), side.history.length.at[rows].set(history.length)
        ),
        tuple(p.at[rows].set(v) for p, v in zip(side.pending, kv)),
        side.pending_at.at[rows].set(at),
    )
    guessed = jnp.where(s.live, jnp.sum(guesses >= 0, axis=1), 0)
    counts = jnp.stack([jnp.sum(s.live), jnp.sum(guessed), jnp.sum(jnp.maximum(n - 1, 0))]).astype(jnp.int32)
    return PG.Paged(pool, PG._put_rows(state.seqs, rows, seqs)), side, made, scores, counts


def run(verify, decode, weights, state: PG.Paged, side: Side, rows, tables, rounds_left, allowed, guess_on,
        shape: Lookup, rounds: int, eos, pad):  # fmt: skip
    """Up to `rounds_left` (traced, at most `rounds`) rounds of the bucket's rows, fewer once none is live, as
    paged.run runs decode steps: allowed [R, words(V)] the rows' token masks; guess_on [R]: False for a
    constrained row (its next mask needs its token), which so makes one token a round. Returns (state, side,
    tokens [R, rounds * (k + 1)] (NO_TOKEN where none), TokenScores alike, counts [3] summed over the rounds)."""
    params = state.seqs.params
    state = state._replace(
        seqs=state.seqs._replace(params=params._replace(allowed=params.allowed.at[rows].set(allowed)))
    )
    width = shape.k + 1
    out = jnp.full((rows.shape[0], rounds, width), SL.NO_TOKEN, jnp.int32)
    scores = R.no_scores((rows.shape[0], rounds, width), state.seqs.seen.shape[1])

    def more(c):
        i, st, _, _, _, _ = c
        return (i < rounds_left) & jnp.any(st.seqs.live[rows])

    def body(c):
        i, st, sd, out, sc, counts = c
        st, sd, made, made_scores, n = one_round(
            verify, decode, weights, st, sd, rows, tables, guess_on, shape, eos, pad
        )
        sc = jax.tree.map(lambda o, m: lax.dynamic_update_index_in_dim(o, m, i, axis=1), sc, made_scores)
        return i + 1, st, sd, lax.dynamic_update_index_in_dim(out, made, i, axis=1), sc, counts + n

    init = (jnp.asarray(0, jnp.int32), state, side, out, scores, jnp.zeros(3, jnp.int32))
    _, state, side, out, scores, counts = lax.while_loop(more, body, init)
    flat = rows.shape[0], rounds * width
    return state, side, out.reshape(flat), jax.tree.map(lambda a: a.reshape(flat + a.shape[3:]), scores), counts
