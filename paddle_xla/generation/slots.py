"""Continuous batching over KV-cache slots: requests join and leave a running decode batch.

The decode step is the generator's own (one program, `max_batch_size` rows over `max_length` cache
slots); what changes is that every row keeps its own clock. A request is prefilled alone (batch 1,
left-padded to its bucket P) and inserted into a free row r: its K/V fill slots [0, P) of row r, and
the row's cursor (where the next K/V goes), position, token count, limit, decode arguments and random
key are set. A decode chunk then advances every live row by up to `chunk` tokens on the device; a row
leaves the batch at its EOS or its limit (or when the host frees it: a cancelled request), and its row
is free for the next insert. Rows never wait for each other.

A row's numbers do not depend on its company: its cache slots, mask, position and key are its own,
and each op of the step computes row by row (the batch dimension is fixed, so every row runs the same
kernels whatever the others hold). Paddle-free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from . import row_logits as R

NO_TOKEN = -1  # in a chunk's output: this row made no token at this step


def prompt_positions(mask):
    """PaddleFormers' position ids of a left-padded prompt: cumsum of the mask minus one, 1 on padding."""
    pos = jnp.cumsum(mask, axis=-1) - 1
    return jnp.where(mask == 0, 1, pos)


class Slots(NamedTuple):
    # NOTE: one array per layer's keys and per layer's values, [B, H, S, D] each, not one [2L, B, H, S, D]:
    # an attention reads its layer's cache where it lies only if that is a whole buffer (XLA:CPU copies a
    # slice of a bigger one before a product reads it, 600 MB per step at 32 rows x 768 slots in fp32)
    past: tuple  # 2L x [B, H, S, D]: layer i's keys at 2i, its values at 2i + 1
    valid: jax.Array  # [B, S] int64: 1 where a slot holds a real token's K/V
    cursor: jax.Array  # [B] int32: the slot the row's next K/V goes into
    token: jax.Array  # [B] int64: the row's last token, not yet in the cache
    position: jax.Array  # [B] int64: its position id
    live: jax.Array  # [B] bool: the row holds a request that goes on
    t: jax.Array  # [B] int32: tokens the row has generated
    limit: jax.Array  # [B] int32: its max_new_tokens
    scores: jax.Array  # [B] float32: the running mean of its score terms
    seen: jax.Array  # [B, V] bool
    keys: jax.Array  # [B, 2] uint32: each row's own random key
    params: R.RowParams
    # NOTE: the last step's K/V, written into `past` at the start of the next step (step() says why)
    pending: jax.Array  # [B, 2L, H, D]
    pending_at: jax.Array  # [B] int32: the slot they go into
    pending_on: jax.Array  # [B] bool: whether they go in at all (the row was live when it made them)
    first: R.TokenScores  # [B]: the first token's scores, where the row's request wants them


def empty(cache_shape, cache_dtype, vocab: int) -> Slots:
    layers2, batch, heads, slots, dim = cache_shape

    def i32():
        return jnp.zeros(batch, jnp.int32)  # NOTE: one buffer per field: the state is donated

    past = tuple(jnp.zeros(cache_shape[1:], cache_dtype) for _ in range(layers2))
    return Slots(
        past,
        jnp.zeros((batch, slots), jnp.int64),
        i32(),
        jnp.zeros(batch, jnp.int64),
        jnp.zeros(batch, jnp.int64),
        jnp.zeros(batch, bool),
        i32(),
        i32(),
        jnp.zeros(batch, jnp.float32),
        jnp.zeros((batch, vocab), bool),
        jnp.zeros((batch, 2), jnp.uint32),
        R.row_params(batch, vocab),
        jnp.zeros((batch, layers2, heads, dim), cache_dtype),
        i32(),
        jnp.zeros(batch, bool),
        R.no_scores((batch,), vocab),
    )


def _set_row(a, row, value):
    return lax.dynamic_update_index_in_dim(a, jnp.asarray(value, a.dtype), row, axis=0)


def _ended(tokens, eos_ids):
    return jnp.isin(tokens, jnp.asarray(eos_ids)) if eos_ids else jnp.zeros(tokens.shape, bool)


def packed(kv, mask, slots: int):
    """Prefill outputs in the cache's layout: each row's K/V moved left past its padding, so that its prompt
    fills slots [0, span) (span: from its first real token to the end), then widened to `slots`. Returns
    (kv [2L, B, H, slots, D], valid [B, slots], span [B]). A key's slot does not change what attention
    computes with it (its rotary position is in its value, and the mask says which slots count), so the
    padding a bucket adds costs no context."""
    p = mask.shape[1]
    lead = jnp.argmax(mask != 0, axis=1).astype(jnp.int32)  # leading padding; 0 for an empty row
    shift = jax.vmap(lambda row, n: jnp.roll(row, -n, axis=2), in_axes=(1, 0), out_axes=1)
    kv = jnp.pad(shift(kv, lead), [(0, 0), (0, 0), (0, 0), (0, slots - p), (0, 0)])
    valid = jnp.pad(jax.vmap(lambda row, n: jnp.roll(row, -n))(mask, lead), [(0, 0), (0, slots - p)])
    return kv, valid, p - lead


def start(
    prefill: Callable,
    weights,
    ids,
    mask,
    live,
    limit,
    params: R.RowParams,
    keys,
    slots: int,
    cache_dtype,
    eos_ids: tuple[int, ...],
) -> Slots:
    """Prefill a batch of prompts (ids, mask [B, P], left-padded) into fresh slots and choose their first
    tokens. live [B]: the rows that hold a prompt; limit [B]: their max_new_tokens; params: [B] arrays."""
    return start_keeping(prefill, weights, ids, mask, live, limit, params, keys, slots, cache_dtype, eos_ids)[0]


def start_keeping(
    prefill: Callable, weights, ids, mask, live, limit, params: R.RowParams, keys, slots, cache_dtype, eos_ids
):
    """start, and what another choice of the same prompts needs (another_choice): (slots, the prompts' last
    logits [B, V], their seen ids before the first token [B, V])."""
    logits, kv = prefill(weights, *_prompt_feeds(ids, mask))
    s = _started(logits, kv, ids, mask, live, limit, params, keys, slots, cache_dtype, eos_ids)
    return s, logits, R.seen_tokens(ids, logits.shape[-1])


def another_choice(view: Slots, logits, seen_before, limit, params: R.RowParams, key, eos_ids: tuple[int, ...]):
    """A batch-1 view that holds the same prompt as `view` (its K/V, slots and next position), with its first
    token chosen from that prompt's last logits under this choice's own params and key: what prefilling the
    prompt again would give it, to the bit, without the prefill (a request's n choices)."""
    return _first_tokens(
        view._replace(seen=seen_before),
        logits,
        view.position,
        jnp.ones(1, bool),
        jnp.reshape(limit, (1,)),
        params,
        key[None],
        eos_ids,
    )


def _prompt_feeds(ids, mask):
    return ids, mask, prompt_positions(mask)


def _started(
    logits, kv, ids, mask, live, limit, params: R.RowParams, keys, slots: int, cache_dtype, eos_ids: tuple[int, ...]
) -> Slots:
    """start's slots from its prefill's logits and K/V."""
    kv, valid, span = packed(kv, mask, slots)
    batch, (layers2, _, heads, _, dim) = ids.shape[0], kv.shape
    s = Slots(
        tuple(kv.astype(cache_dtype)),
        valid.astype(jnp.int64),
        span.astype(jnp.int32),
        jnp.zeros(batch, jnp.int64),
        jnp.sum(mask, axis=-1).astype(jnp.int64),
        jnp.zeros(batch, bool),
        jnp.zeros(batch, jnp.int32),
        jnp.zeros(batch, jnp.int32),
        jnp.zeros(batch, jnp.float32),
        R.seen_tokens(ids, logits.shape[-1]),
        keys,
        params,
        jnp.zeros((batch, layers2, heads, dim), cache_dtype),
        jnp.zeros(batch, jnp.int32),
        jnp.zeros(batch, bool),
        R.no_scores((batch,), logits.shape[-1]),
    )
    return _first_tokens(s, logits, s.position, live, limit, params, keys, eos_ids)


def _first_tokens(
    s: Slots, logits, position, live, limit, params: R.RowParams, keys, eos_ids: tuple[int, ...]
) -> Slots:
    """The rows' state once their prompt is in the cache (s.seen its ids; `position` the next token's): the
    first token chosen from the prompt's last logits, and the live rows set going."""
    split = jax.vmap(jax.random.split)(keys)
    batch = logits.shape[0]
    token, term = R.choose(logits, params, s.seen, jnp.zeros(batch, jnp.int32), split[:, 1], eos_ids)
    goes_on = live & ~(_ended(token, eos_ids) & ~params.ignore_eos) & (limit > 1)
    return s._replace(
        token=token.astype(jnp.int64),
        position=position.astype(jnp.int64),
        live=goes_on,
        t=live.astype(jnp.int32),
        limit=limit.astype(jnp.int32),
        scores=jnp.where(live, term, 0.0),
        seen=R.mark_seen(s.seen, token),
        keys=split[:, 0],
        params=params,
        first=R.token_scores(logits, token, params.logprobs & live),
    )


def chunk_positions(cursor, mask):
    """Position ids of a prompt chunk (mask [B, c]) that follows `cursor` real tokens: the whole prompt's
    prompt_positions, a chunk at a time."""
    pos = cursor[:, None].astype(jnp.int64) + jnp.cumsum(mask, axis=-1) - 1
    return jnp.where(mask == 0, 1, pos)


def absorb(
    extend: Callable,
    weights,
    s: Slots,
    ids,
    mask,
    fresh,
    last,
    live,
    limit,
    params: R.RowParams,
    keys,
    eos_ids: tuple[int, ...],
) -> tuple[Slots, jax.Array]:
    """One chunk of every row's prompt (ids, mask [B, c]: left-padded prompts cut into chunks of c from the
    left) through the extend program against what the rows' cache holds; the chunk's real tokens' K/V go
    into the next slots (padding takes none). fresh [B]: the chunk is the row's first (its old cache and
    state are dropped). last (a bool): the chunk ends the prompts, so the rows' first tokens are chosen
    and the live ones start decoding (live, limit, params, keys as in start). Returns (slots, logits)."""
    return _absorb_keeping(extend, weights, s, ids, mask, fresh, last, live, limit, params, keys, eos_ids)[:2]


def _absorb_keeping(extend, weights, s: Slots, ids, mask, fresh, last, live, limit, params, keys, eos_ids):
    """absorb's (slots, logits), and the rows' seen ids before their first tokens (another_choice)."""
    feeds, kept = chunk_feeds(s, ids, mask, fresh)
    logits, kv = extend(weights, *feeds)
    return _absorbed(s, kept, logits, kv, mask, last, live, limit, params, keys, eos_ids), logits, kept[2]


def chunk_feeds(s: Slots, ids, mask, fresh):
    """The extend program's feeds for a chunk, and what _absorbed keeps of the rows' state."""
    valid = jnp.where(fresh[:, None], 0, s.valid)
    cursor = jnp.where(fresh, 0, s.cursor)
    seen = jnp.where(fresh[:, None], False, s.seen) | R.seen_tokens(ids, s.seen.shape[1])
    feeds = (
        ids,
        jnp.concatenate([valid, mask.astype(valid.dtype)], axis=-1),
        chunk_positions(cursor, mask),
        jnp.stack(s.past),
    )
    return feeds, (valid, cursor, seen)


def _absorbed(
    s: Slots, kept, logits, kv, mask, last, live, limit, params: R.RowParams, keys, eos_ids: tuple[int, ...]
) -> Slots:
    """absorb's slots from its extend program's logits and the chunk's K/V."""
    filled = chunk_written(s, kept, kv, mask)
    begun = _first_tokens(filled, logits, filled.cursor, live, limit, params, keys, eos_ids)
    return jax.tree.map(lambda b, f: jnp.where(last, b, f), begun, filled)


def chunk_written(s: Slots, kept, kv, mask) -> Slots:
    """The slots with a chunk's real tokens' K/V (the extend program's `kv`) in their rows' next slots; no row
    live (its first token is not chosen yet). kept: what chunk_feeds kept of the rows' state."""
    valid, cursor, seen = kept
    batch, slots = s.valid.shape
    at = jnp.where(mask != 0, cursor[:, None] + jnp.cumsum(mask, axis=-1).astype(jnp.int32) - 1, slots)
    rows = jnp.arange(batch)[:, None]
    past = tuple(
        layer.at[rows, :, at].set(jnp.transpose(new, (0, 2, 1, 3)).astype(layer.dtype), mode="drop")
        for layer, new in zip(s.past, kv)
    )
    valid = valid.at[rows, at].set(1, mode="drop")
    return s._replace(
        past=past,
        valid=valid,
        cursor=cursor + jnp.sum(mask, axis=-1).astype(jnp.int32),
        seen=seen,
        live=jnp.zeros(batch, bool),
        pending_on=jnp.zeros(batch, bool),
    )


def absorb_row(
    extend: Callable,
    weights,
    s: Slots,
    row,
    ids,
    mask,
    fresh,
    last,
    limit,
    params: R.RowParams,
    key,
    eos_ids: tuple[int, ...],
) -> tuple[Slots, jax.Array, jax.Array]:
    """absorb for one request's chunk (ids, mask [1, c]) into `row`; params as [1] arrays. Returns (the row's
    new state as batch-1 Slots, the first token, whether the row goes on; the last two meaningful after the
    last chunk). `with_row` puts the state back, in a program of its own: read and written back in one
    program, the cache was copied whole twice per chunk by XLA:CPU (2 x 600 MB at 32 rows x 768 slots in
    fp32), as the row's slice was fused into its readers."""
    view, _, _ = absorb_row_keeping(extend, weights, s, row, ids, mask, fresh, last, limit, params, key, eos_ids)
    return view, view.token[0], view.live[0]


def absorb_row_keeping(
    extend: Callable, weights, s: Slots, row, ids, mask, fresh, last, limit, params: R.RowParams, key, eos_ids
):
    """absorb_row's new state of the row, and (as start_keeping) the chunk's last logits and the row's seen ids
    before its first token."""
    one, fresh, live, limit = _row_of(s, row), jnp.reshape(fresh, (1,)), jnp.ones(1, bool), jnp.reshape(limit, (1,))
    return _absorb_keeping(extend, weights, one, ids, mask, fresh, last, live, limit, params, key[None], eos_ids)


def _row_of(s: Slots, row) -> Slots:
    """The batch-1 Slots of one row (every array's batch is its axis 0)."""
    return jax.tree.map(lambda a: lax.dynamic_slice_in_dim(a, row, 1, axis=0), s)


def with_row(s: Slots, row, view: Slots) -> Slots:
    """s with `row` set to the batch-1 Slots `view`."""
    return jax.tree.map(lambda a, v: lax.dynamic_update_slice_in_dim(a, v.astype(a.dtype), row, axis=0), s, view)


def insert(
    prefill: Callable, weights, s: Slots, row, ids, mask, limit, params: R.RowParams, key, eos_ids: tuple[int, ...]
) -> tuple[Slots, jax.Array, jax.Array]:
    """Prefill one prompt (ids, mask [1, P]) into `row` and choose its first token. `params` holds this
    request's decode arguments as [1] arrays. Returns (slots, first token, whether the row goes on). The
    row's pending K/V (its previous request's last) are dropped with the rest of its state."""
    one = start(
        prefill,
        weights,
        ids,
        mask,
        jnp.ones(1, bool),
        jnp.reshape(limit, (1,)),
        params,
        key[None],
        s.valid.shape[1],
        s.past[0].dtype,
        eos_ids,
    )
    return with_row(s, row, one), one.token[0], one.live[0]


def free(s: Slots, row) -> Slots:
    """End the row's request now (a cancelled or timed-out one): the next chunk leaves it alone."""
    return s._replace(live=_set_row(s.live, row, False))


def step(
    decode: Callable, weights, s: Slots, eos_ids: tuple[int, ...], pad: int
) -> tuple[Slots, jax.Array, R.TokenScores]:
    """One decode step for every row; returns the slots, the tokens the live rows made ([B], NO_TOKEN
    for the others) and their scores (zeros where a row does not want them).

    The K/V a step makes are written into the cache at the start of the next step, not at its end: then
    nothing reads the cache before the write, and XLA updates it in place. Written after the decode, the
    cache is both read (by the attention) and updated in one loop body, and XLA:CPU copied all of it twice
    per step (2 x 600 MB at 32 rows x 768 slots in fp32)."""
    s = _with_pending_written(s)
    logits, new = decode(weights, *_step_feeds(s))
    return _stepped(s, logits, new, eos_ids, pad)


def _with_pending_written(s: Slots) -> Slots:
    """The slots with the last step's K/V in their cache slots; a row that was not live writes nothing."""
    batch, slots = s.valid.shape
    rows = jnp.arange(batch)
    at = jnp.where(s.pending_on, s.pending_at, slots)  # NOTE: out of range: dropped
    past = tuple(layer.at[rows, :, at].set(s.pending[:, i], mode="drop") for i, layer in enumerate(s.past))
    return s._replace(past=past, valid=s.valid.at[rows, at].set(1, mode="drop"))


def _step_feeds(s: Slots):
    """The decode program's feeds (the slots' pending K/V already written)."""
    batch = s.valid.shape[0]
    mask = jnp.concatenate([s.valid, jnp.ones((batch, 1), s.valid.dtype)], axis=-1)
    # NOTE: the program takes the cache as one [2L, ...] feed and unbinds it per layer: XLA folds the slices of
    # this stack back into the layers' own buffers
    return s.token[:, None], mask, s.position[:, None], jnp.stack(s.past)


def _stepped(s: Slots, logits, new, eos_ids: tuple[int, ...], pad: int) -> tuple[Slots, jax.Array, R.TokenScores]:
    """step's slots, tokens and scores from its decode program's logits and K/V."""
    split = jax.vmap(jax.random.split)(s.keys)
    token, term = R.choose(logits, s.params, s.seen, s.t, split[:, 1], eos_ids)
    scores_made = R.token_scores(logits, token, s.params.logprobs & s.live)
    token, scores, live = finish(token, term, s.scores, s.live, s.t, s.limit, eos_ids, pad, s.params.ignore_eos)
    made = jnp.where(s.live, token, NO_TOKEN)
    seen = jnp.where(s.live[:, None], R.mark_seen(s.seen, token), s.seen)
    return (
        Slots(
            s.past,
            s.valid,
            s.cursor + s.live,
            token.astype(s.token.dtype),
            s.position + s.live,
            live,
            s.t + s.live,
            s.limit,
            scores,
            seen,
            split[:, 0],
            s.params,
            jnp.moveaxis(new, 1, 0).astype(s.past[0].dtype),
            s.cursor,
            s.live,
            s.first,
        ),
        made,
        scores_made,
    )


def step_beside_chunk(
    both: Callable,
    weights,
    s: Slots,
    row,
    ids,
    mask,
    fresh,
    last,
    limit,
    params: R.RowParams,
    key,
    eos_ids: tuple[int, ...],
    pad: int,
):
    """step, and absorb_row's chunk into `row`, in one program: both(weights, step feeds, chunk feeds) runs the
    decode step and the batch-1 extend with their linear layers' products shared (batch_engine.program_together).
    The row is not live in the step (its prompt is going in), so the step leaves it as it was. Returns (the
    slots after the step, the step's tokens [B] and their scores, then absorb_row's three: the row's state for
    with_row, its first token, whether it goes on)."""
    s = _with_pending_written(s)
    view = _row_of(s, row)
    feeds, kept = chunk_feeds(view, ids, mask, jnp.reshape(fresh, (1,)))
    (logits, new), (chunk_logits, kv) = both(weights, _step_feeds(s), feeds)
    stepped, made, scores = _stepped(s, logits, new, eos_ids, pad)
    view = _absorbed(
        view,
        kept,
        chunk_logits,
        kv,
        mask,
        last,
        jnp.ones(1, bool),
        jnp.reshape(limit, (1,)),
        params,
        key[None],
        eos_ids,
    )
    return stepped, made, scores, view, view.token[0], view.live[0]


def step_beside_prompt(
    both: Callable,
    weights,
    s: Slots,
    row,
    ids,
    mask,
    limit,
    params: R.RowParams,
    key,
    eos_ids: tuple[int, ...],
    pad: int,
):
    """step, and insert's prefill of a prompt within a bucket, in one program (as step_beside_chunk, with the
    batch-1 prefill of the bucket in place of the extend). Returns as step_beside_chunk."""
    s = _with_pending_written(s)
    (logits, new), (prompt_logits, kv) = both(weights, _step_feeds(s), _prompt_feeds(ids, mask))
    stepped, made, scores = _stepped(s, logits, new, eos_ids, pad)
    one = _started(
        prompt_logits,
        kv,
        ids,
        mask,
        jnp.ones(1, bool),
        jnp.reshape(limit, (1,)),
        params,
        key[None],
        s.valid.shape[1],
        s.past[0].dtype,
        eos_ids,
    )
    return stepped, made, scores, one, one.token[0], one.live[0]


def finish(token, term, scores, live, t, limit, eos_ids: tuple[int, ...], pad: int, ignore_eos=False):
    """PaddleFormers' end of a step: rows that had ended get pad_token_id and keep their score; the others
    move the running mean of their score terms (t: the tokens before this one) and end at an EOS or at
    their limit. Returns (tokens, scores, live)."""
    token = jnp.where(live, token, pad)
    n = t.astype(jnp.float32)
    scores = jnp.where(live, (scores * n + term) / (n + 1), scores)
    return token, scores, live & ~(_ended(token, eos_ids) & ~ignore_eos) & (t + 1 < limit)


def run(decode: Callable, weights, s: Slots, chunk: int, eos_ids: tuple[int, ...], pad: int):
    """Up to `chunk` decode steps, fewer once no row is live. Returns (slots, tokens [B, chunk]: what each
    row made at each step, NO_TOKEN where it made none, and their TokenScores [B, chunk])."""
    batch = s.valid.shape[0]
    out = jnp.full((batch, chunk), NO_TOKEN, jnp.int32)
    scores = R.no_scores((batch, chunk), s.seen.shape[1])

    def more(c):
        i, s, _, _ = c
        return (i < chunk) & jnp.any(s.live)

    def body(c):
        i, s, out, scores = c
        s, made, step_scores = step(decode, weights, s, eos_ids, pad)
        return i + 1, s, at_step(out, made, i), at_step(scores, step_scores, i)

    _, s, out, scores = lax.while_loop(more, body, (jnp.asarray(0, jnp.int32), s, out, scores))
    return s, out, scores


def at_step(out, made, i):
    """A chunk's outputs (arrays [B, chunk, ...]) with step i's (arrays [B, ...]) in place."""
    return jax.tree.map(lambda o, m: lax.dynamic_update_index_in_dim(o, m.astype(o.dtype), i, axis=1), out, made)
