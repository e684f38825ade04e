"""One speculative round for every row, on the device: guess k tokens, verify them in one step of the target
over k + 1 positions, keep the agreeing prefix and the target's own next token.

The verify step is the extend program (a prompt chunk's step, capture/causal_lm.py) captured for k + 1 tokens
with the LM head on every position (all_logits.py): its inputs are the row's last token and the k guesses,
so position j's logits are what a plain decode step gives after the row's tokens and guesses 1..j. Position j
chooses as a plain step does (row_logits.choose's processing: min_new_tokens and the repetition penalty
counted up to that position); the row goes on to position j + 1 only while the choice equals guess j + 1
and the row has not ended (EOS, max_new_tokens). A greedy row so makes exactly the tokens plain decoding
makes. A sampled row keeps a guess with probability min(1, p/q) and otherwise draws from the normalised
max(p - q, 0) (the standard speculative sampling rule; p the target's filtered distribution after Paddle's
processors, q the one the guess was drawn from), so its tokens follow the target's distribution. A row
without a guess (prompt lookup found none) takes the plain decode step's numbers instead (`either`).

Cache: the K/V of the positions a row keeps are written at the start of the next round (as slots.step writes
a decode step's), into the slots after the row's cursor; the rejected positions' are never written, and the
cursor moves by the kept count only. A draft model's cache keeps what it computed for the kept tokens: its
cursor rolls back past the rejected guesses, and a guess it never computed (the k-th, when all k are kept)
goes in first in the next round. Paddle-free."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ...ops import fixed_order
from .. import row_logits as R
from .. import slots as SL
from . import lookup


class Draft(NamedTuple):
    """A draft model's side of the rows (draft_model)."""

    cache: SL.Slots  # its past, valid and cursor (the rest unused)
    missing: jax.Array  # [B] int64: a kept guess the draft's cache lacks (the k-th, when all k were kept)
    has_missing: jax.Array  # [B] bool


class Tally(NamedTuple):
    """Per row: verify steps run, guesses made, guesses kept."""

    steps: jax.Array  # [B] int32
    guessed: jax.Array  # [B] int32
    kept: jax.Array  # [B] int32


class Spec(NamedTuple):
    target: SL.Slots  # the target's rows, as slots.py keeps them (`token`: the last token, not yet cached)
    pending: tuple  # 2L x [B, k + 1, H, D]: the last verify step's K/V, written at the next round's start
    pending_at: jax.Array  # [B, k + 1] int32: their slots (the cache's length where a position was not kept)
    draft: Draft | None
    history: lookup.History | None  # ngram: the rows' tokens
    tally: Tally


def begin(target: SL.Slots, k: int, draft: SL.Slots | None, history: lookup.History | None) -> Spec:
    """The rounds' state from the prefilled target (and the draft's prefilled cache, or the rows' histories)."""
    batch, slots = target.valid.shape
    heads, dim = target.past[0].shape[1], target.past[0].shape[3]
    pending = tuple(jnp.zeros((batch, k + 1, heads, dim), layer.dtype) for layer in target.past)
    zeros = jnp.zeros(batch, jnp.int32)
    side = None if draft is None else Draft(draft, jnp.zeros(batch, jnp.int64), jnp.zeros(batch, bool))
    return Spec(target, pending, jnp.full((batch, k + 1), slots, jnp.int32), side, history, Tally(zeros, zeros, zeros))


def _pending_written(s: SL.Slots, pending, at) -> SL.Slots:
    rows = jnp.arange(at.shape[0])[:, None]
    past = tuple(layer.at[rows, :, at].set(new, mode="drop") for layer, new in zip(s.past, pending))
    return s._replace(past=past, valid=s.valid.at[rows, at].set(1, mode="drop"))


def _fed(step: Callable, weights, d: SL.Slots, ids, position, on) -> tuple[SL.Slots, jax.Array]:
    """One decode step of the draft on ids [B] at `position`, its K/V written at the cursor of the rows `on`."""
    batch, slots = d.valid.shape
    mask = jnp.concatenate([d.valid, jnp.ones((batch, 1), d.valid.dtype)], axis=-1)
    logits, new = step(weights, ids[:, None].astype(jnp.int64), mask, position[:, None], jnp.stack(d.past))
    at = jnp.where(on, d.cursor, slots)
    rows = jnp.arange(batch)
    past = tuple(layer.at[rows, :, at].set(new[i].astype(layer.dtype), mode="drop") for i, layer in enumerate(d.past))
    return d._replace(past=past, valid=d.valid.at[rows, at].set(1, mode="drop"), cursor=d.cursor + on), logits


def _normalised(probs):
    return probs / jnp.sum(probs, axis=-1, keepdims=True)


def _draft_choice(logits, s: SL.Slots, generated, key, eos_ids):
    """A draft's guess and the distribution it was drawn from (one-hot for a greedy row)."""
    logits = R.processed(logits, s.params, s.seen, generated, eos_ids)
    greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    vocab = logits.shape[-1]

    def drawn(logits):
        q = _normalised(R.sampling_probs(logits, s.params))
        token = jax.vmap(jax.random.categorical)(key, jnp.log(q)).astype(jnp.int32)
        token = jnp.where(s.params.sampling, token, greedy)
        return token, jnp.where(s.params.sampling[:, None], q, jax.nn.one_hot(greedy, vocab, dtype=jnp.float32))

    def argmax_only(logits):
        return greedy, jax.nn.one_hot(greedy, vocab, dtype=jnp.float32)

    return lax.cond(jnp.any(s.params.sampling), drawn, argmax_only, logits)


def draft_guesses(step: Callable, weights, d: Draft, s: SL.Slots, k: int, keys, eos_ids):
    """(the draft's cache after k steps, its cursor before them, guesses [B, k], their distributions [B, k, V]).
    The draft takes the token it lacks first (all rows at once, skipped when none lacks one)."""
    live = s.live

    last = d.cache.valid.shape[1] - 1

    def catch_up(c):
        return _fed(step, weights, c, d.missing, s.position - 1, d.has_missing & live)[0]

    cache = lax.cond(jnp.any(d.has_missing & live), catch_up, lambda c: c, d.cache)
    batch, vocab = s.seen.shape

    def body(j, carry):
        cache, x, out, dist, seen = carry
        cache, logits = _fed(step, weights, cache, x, jnp.minimum(s.position + j, last), live)
        # NOTE: the guesses so far count as seen, as the target's positions count them (repetition penalty)
        token, q = _draft_choice(logits, s._replace(seen=seen), s.t + j, keys[:, j], eos_ids)
        seen = jnp.where(live[:, None], R.mark_seen(seen, token), seen)
        return cache, token.astype(jnp.int64), out.at[:, j].set(token), dist.at[:, j].set(q), seen

    start = cache.cursor
    init = (cache, s.token, jnp.zeros((batch, k), jnp.int32), jnp.zeros((batch, k, vocab), jnp.float32), s.seen)
    cache, _, out, dist, _ = lax.fori_loop(0, k, body, init)
    return cache, start, out, dist


def _choice(logits, s: SL.Slots, seen, generated, key, guess, q, eos_ids):
    """Position j's token and score term: greedy, the argmax; sampled, the guess kept with probability
    min(1, p/q), else a draw from the normalised max(p - q, 0) (from p where there is no guess)."""
    logits = R.processed(logits, s.params, seen, generated, eos_ids)
    greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)

    def sampled(logits):
        log_probs = fixed_order.log_softmax(logits)
        p = _normalised(R.sampling_probs(logits, s.params))
        has = guess >= 0
        g = jnp.maximum(guess, 0)[:, None]
        pg, qg = (jnp.take_along_axis(a, g, axis=-1)[:, 0] for a in (p, q))
        coin, other = jax.vmap(jax.random.split)(key)[:, 0], jax.vmap(jax.random.split)(key)[:, 1]
        kept = has & (jax.vmap(jax.random.uniform)(coin) * qg < pg)
        rest = jnp.where(has[:, None], jnp.maximum(p - q, 0.0), p)
        rest = jnp.where(jnp.sum(rest, axis=-1, keepdims=True) > 0, rest, p)  # NOTE: p == q: a guess is kept
        token = jnp.where(kept, guess, jax.vmap(jax.random.categorical)(other, jnp.log(rest)).astype(jnp.int32))
        token = jnp.where(s.params.sampling, token, greedy)
        terms = jnp.where(s.params.sampling[:, None], log_probs, logits)
        return token, jnp.take_along_axis(terms, token[:, None], axis=-1)[:, 0]

    def argmax_only(logits):
        return greedy, jnp.take_along_axis(logits, greedy[:, None], axis=-1)[:, 0]

    return lax.cond(jnp.any(s.params.sampling), sampled, argmax_only, logits)


def accepted(s: SL.Slots, logits, guesses, dists, keys, eos_ids, pad):
    """The rows after keeping what the verify step's logits [B, k + 1, V] agree with: (slots, made [B, k + 1]:
    the tokens made at each position, NO_TOKEN past a row's last, kept [B, k + 1]: the positions whose inputs
    stay in the cache). dists [B, k, V]: the guesses' distributions (None: one-hot, as prompt lookup's)."""
    batch, width, vocab = logits.shape
    ahead = jnp.concatenate([guesses, jnp.full((batch, 1), lookup.NONE, guesses.dtype)], axis=1)
    if dists is None:
        dists = jax.nn.one_hot(jnp.maximum(guesses, 0), vocab, dtype=jnp.float32) * (guesses >= 0)[..., None]
    dists = jnp.concatenate([dists, jnp.zeros((batch, 1, vocab), dists.dtype)], axis=1)

    def body(carry, j):
        seen, t, scores, live, on = carry
        token, term = _choice(logits[:, j], s, seen, t, keys[:, j], ahead[:, j], dists[:, j], eos_ids)
        token, scores, goes_on = SL.finish(token, term, scores, on, t, s.limit, eos_ids, pad, s.params.ignore_eos)
        seen = jnp.where(on[:, None], R.mark_seen(seen, token), seen)
        made = jnp.where(on, token, SL.NO_TOKEN)
        nxt = on & goes_on & (token == ahead[:, j])
        return (seen, t + on, scores, jnp.where(on, goes_on, live), nxt), (made, on)

    init = (s.seen, s.t, s.scores, s.live, s.live)
    (seen, t, scores, live, _), (made, kept) = lax.scan(body, init, jnp.arange(width))
    made, kept = made.T, kept.T
    n = jnp.sum(kept, axis=1).astype(jnp.int32)
    last = jnp.take_along_axis(made, jnp.maximum(n - 1, 0)[:, None], axis=1)[:, 0]
    out = s._replace(
        token=jnp.where(n > 0, last, s.token).astype(s.token.dtype),
        cursor=s.cursor + n,
        position=s.position + n,
        live=live,
        t=t,
        scores=scores,
        seen=seen,
    )
    return out, made, kept


class Guesser:
    """How a round's guesses are made (propose) and what the guesser keeps of the round (settle)."""

    def propose(self, weights, sp: Spec, s: SL.Slots, keys):
        """(sp, guesses [B, k] int32 (lookup.NONE: none), their distributions [B, k, V] or None, a memo)."""
        raise NotImplementedError

    def settle(self, sp: Spec, memo, kept, made, guesses) -> Spec:
        raise NotImplementedError


class FromDraft(Guesser):
    """A draft model's k decode steps (draft_model)."""

    def __init__(self, step: Callable, k: int, eos_ids: tuple[int, ...]):
        self.step, self.k, self.eos_ids = step, k, eos_ids

    def propose(self, weights, sp: Spec, s: SL.Slots, keys):
        assert sp.draft is not None
        cache, start, guesses, dists = draft_guesses(self.step, weights, sp.draft, s, self.k, keys, self.eos_ids)
        return sp._replace(draft=sp.draft._replace(cache=cache)), guesses, dists, start

    def settle(self, sp: Spec, memo, kept, made, guesses) -> Spec:
        assert sp.draft is not None
        return sp._replace(draft=kept_by_draft(sp.draft.cache, memo, kept, guesses, self.k))


class FromHistory(Guesser):
    """Prompt lookup in the rows' own tokens (ngram)."""

    def __init__(self, k: int, longest: int, shortest: int):
        self.k, self.longest, self.shortest = k, longest, shortest

    def propose(self, weights, sp: Spec, s: SL.Slots, keys):
        assert sp.history is not None
        guesses = lookup.guesses(sp.history, self.k, self.longest, self.shortest)
        return sp, jnp.where(s.live[:, None], guesses, lookup.NONE), None, None

    def settle(self, sp: Spec, memo, kept, made, guesses) -> Spec:
        assert sp.history is not None
        return sp._replace(history=lookup.appended(sp.history, made))


class Target(NamedTuple):
    """The target's two programs: verify over k + 1 tokens (every position's logits), and the plain decode step."""

    verify: Callable
    step: Callable
    # NOTE: prompt lookup often has no guess; a draft always has (the decode step would only be compiled)
    plain_when_unguessed: bool = True


def by_guess(guessed, verified, stepped):
    """Each row's (logits [B, k + 1, V], K/V 2L x [B, k + 1, H, D]): the verify step's where it guessed, the
    decode step's (position 0 alone) where it did not."""
    pick = lambda v, d: jnp.where(guessed.reshape((-1,) + (1,) * (v.ndim - 1)), v, d)  # noqa: E731
    return pick(verified[0], stepped[0]), tuple(pick(v, d) for v, d in zip(verified[1], stepped[1]))


def either(guessed, live, verify: Callable, step: Callable, shapes):
    """by_guess over the rows: the verify step runs where a live row guessed and the decode step where a live row
    did not, so a row's numbers are one program's whatever its company guessed (each program alone gives a
    row the same numbers at any row count: paged_engine.py's check), and a round where no row guessed costs
    one token's step. shapes: the programs' outputs' (jax.ShapeDtypeStruct), zeros where one is skipped."""
    zeros = lambda: jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)  # noqa: E731
    v = lax.cond(jnp.any(guessed & live), verify, zeros)
    d = lax.cond(jnp.any(~guessed & live), step, zeros)
    return by_guess(guessed, v, d)


def checked(target: Target, weights, token, guesses, filled, position, last_position: int, past, live, vocab: int):
    """(logits [B, k + 1, V] float32, K/V 2L x [B, k + 1, H, D]) of each row's token [B] and its guesses [B, k]
    over its past [2L, B, H, S, D] (filled [B, S]: the slots it holds); a row without a guess gets the plain
    decode step's (position 0 alone: either()). Both the slots' and the paged rounds call it."""
    batch, k = guesses.shape
    dtype = past.dtype
    ids = jnp.concatenate([token[:, None], jnp.maximum(guesses, 0).astype(token.dtype)], axis=1)
    mask = jnp.concatenate([filled, jnp.ones((batch, k + 1), filled.dtype)], axis=-1)
    # NOTE: a kept input's position is below the cache's length; a later guess's is clamped (never kept)
    pos = jnp.minimum(position[:, None] + jnp.arange(k + 1), last_position)

    def verified():
        logits, kv = target.verify(weights, ids, mask, pos, past)
        return logits.astype(jnp.float32), tuple(jnp.swapaxes(kv[i], 1, 2).astype(dtype) for i in range(past.shape[0]))

    def stepped():
        logits, new = target.step(weights, ids[:, :1], mask[:, : filled.shape[1] + 1], pos[:, :1], past)
        return widened(logits, new, k, dtype)

    if not target.plain_when_unguessed:
        return verified()
    kv = jax.ShapeDtypeStruct((batch, k + 1, past.shape[2], past.shape[4]), dtype)
    shapes = (jax.ShapeDtypeStruct((batch, k + 1, vocab), jnp.float32), (kv,) * past.shape[0])
    return either(jnp.any(guesses >= 0, axis=1), live, verified, stepped, shapes)


def widened(logits, new, k: int, dtype):
    """A decode step's (logits [B, V], K/V [2L, B, H, D]) as a verify step's: position 0, the rest zeros."""
    batch, vocab = logits.shape
    # NOTE: the row guessed nothing, so only position 0 is chosen; the others repeat it (finite, never kept)
    wide = jnp.broadcast_to(logits.astype(jnp.float32)[:, None], (batch, k + 1, vocab))
    kv = tuple(jnp.pad(new[i].astype(dtype)[:, None], [(0, 0), (0, k), (0, 0), (0, 0)]) for i in range(new.shape[0]))
    return wide, kv


def one_round(target: Target, guesser: Guesser, weights, sp: Spec, k: int, eos_ids, pad) -> tuple[Spec, jax.Array]:
    """One round for every row; returns the state and the tokens made [B, k + 1] (NO_TOKEN where none).
    weights: (the target's, the draft's or None)."""
    s = _pending_written(sp.target, sp.pending, sp.pending_at)
    slots = s.valid.shape[1]
    keys = jax.vmap(lambda key: jax.random.split(key, 2 * k + 2))(s.keys)
    sp, guesses, dists, memo = guesser.propose(weights[1], sp, s, keys[:, 1 : k + 1])
    past, vocab = jnp.stack(s.past), s.seen.shape[1]
    logits, pending = checked(target, weights[0], s.token, guesses, s.valid, s.position, slots - 1, past, s.live, vocab)
    after, made, kept = accepted(s, logits, guesses, dists, keys[:, k + 1 :], eos_ids, pad)
    at = jnp.where(kept, s.cursor[:, None] + jnp.arange(k + 1), slots).astype(jnp.int32)
    n = jnp.sum(kept, axis=1).astype(jnp.int32)
    guessed = jnp.where(s.live, jnp.sum(guesses >= 0, axis=1), 0)
    tally = Tally(*(a + b.astype(jnp.int32) for a, b in zip(sp.tally, (s.live, guessed, jnp.maximum(n - 1, 0)))))
    sp = guesser.settle(sp, memo, kept, made, guesses)
    return sp._replace(target=after._replace(keys=keys[:, 0]), pending=pending, pending_at=at, tally=tally), made


def kept_by_draft(d: SL.Slots, start, kept, guesses, k: int) -> Draft:
    """The draft's side after a round: its cache rolled back to the kept tokens it computed (the row's token
    and guesses 1..k-1, from `start`), and the k-th guess to take first next round where all k were kept."""
    cursor = start + jnp.sum(kept[:, :k], axis=1).astype(jnp.int32)
    valid = jnp.where(jnp.arange(d.valid.shape[1])[None] < cursor[:, None], d.valid, 0)
    return Draft(d._replace(cursor=cursor, valid=valid), guesses[:, k - 1].astype(jnp.int64), kept[:, k])


def run(target: Target, guesser: Guesser, weights, sp: Spec, rounds: int, k: int, eos_ids, pad):
    """Up to `rounds` rounds, fewer once no row is live: (state, made [B, rounds * (k + 1)])."""
    batch = sp.target.valid.shape[0]
    out = jnp.full((batch, rounds, k + 1), SL.NO_TOKEN, jnp.int32)

    def more(c):
        i, sp, _ = c
        return (i < rounds) & jnp.any(sp.target.live)

    def body(c):
        i, sp, out = c
        sp, made = one_round(target, guesser, weights, sp, k, eos_ids, pad)
        return i + 1, sp, lax.dynamic_update_index_in_dim(out, made, i, axis=1)

    _, sp, out = lax.while_loop(more, body, (jnp.asarray(0, jnp.int32), sp, out))
    return sp, out.reshape(batch, rounds * (k + 1))
