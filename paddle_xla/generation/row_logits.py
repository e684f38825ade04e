"""One decode step's choice of the next token, as PaddleFormers' `generate` makes it, per row.

Pure JAX on [batch, vocab] float32 logits, so that the whole step sits inside the device-side decode
loop. Every row has its own decode arguments as traced [batch] arrays (greedy or sampled, temperature,
top_k, top_p, repetition penalty, min_new_tokens), so one program serves any mix of requests, and
each row draws from its own key, so its tokens do not depend on its neighbours. The order and
arithmetic follow PaddleFormers 1.2 (`generation/utils.py` greedy_search and sample,
`generation/logits_process.py`):
1. min_new_tokens: while a row has generated fewer tokens than that, its EOS logits are the lowest float.
2. repetition_penalty: every token id seen so far in the row (prompt, its padding and generated
   tokens) has its logit multiplied by the penalty if negative, divided by it otherwise.
3. greedy: the argmax; its score term is that processed logit (not a log-probability).
   sampling: the score term is log_softmax(processed logits) at the drawn token, taken before
   temperature; then logits / temperature, softmax, top-k on the probabilities (ties at the k-th
   value kept; 0: off), top-p on what is left (sorted descending, a token is dropped once the
   cumulative probability *before* it exceeds top_p, so the token that crosses it stays; 1.0: off),
   no renormalisation, and one draw from the remaining probability mass.
Before the choice, a constrained row's mask (token_masks.py: structured output) puts the logits of the tokens
its grammar forbids at the lowest float; such a row's grammar, not min_new_tokens, decides when it may end.
A penalty or temperature of 1.0 leaves the values bit-identical. `seen` replaces PaddleFormers'
growing input_ids: a [batch, vocab] mask of the ids a row has held. The softmaxes' sums and top-p's running
sum are taken in a fixed order (ops/fixed_order.py), so a row's numbers do not depend on how many rows its
step carries (a paged server's row buckets). Paddle-free.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..ops import fixed_order
from . import token_masks as TM


class RowParams(NamedTuple):
    sampling: jax.Array  # [B] bool
    temperature: jax.Array  # [B] float32
    top_k: jax.Array  # [B] int32, 0: off
    top_p: jax.Array  # [B] float32, 1.0: off
    penalty: jax.Array  # [B] float32 (repetition_penalty)
    min_new: jax.Array  # [B] int32 (min_new_tokens)
    logprobs: jax.Array  # [B] bool: the row's tokens' log-probabilities and top alternatives are wanted
    ignore_eos: jax.Array  # [B] bool: an EOS does not end the row (vLLM's ignore_eos; max_new_tokens does)
    allowed: jax.Array  # [B, words(V)] int32: the tokens the row may make next (token_masks.py), -1: any


def row_params(batch: int, vocab: int) -> RowParams:
    """Every row greedy, unfiltered and unconstrained (each field its own buffer, as a donated state needs)."""
    return RowParams(
        jnp.zeros(batch, bool),
        jnp.ones(batch, jnp.float32),
        jnp.zeros(batch, jnp.int32),
        jnp.full(batch, 1.0, jnp.float32),
        jnp.full(batch, 1.0, jnp.float32),
        jnp.zeros(batch, jnp.int32),
        jnp.zeros(batch, bool),
        jnp.zeros(batch, bool),
        jnp.asarray(TM.unconstrained(batch, vocab)),
    )


TOP_LOGPROBS = 20  # NOTE: the most alternatives a request may ask for (OpenAI's chat top_logprobs)


class TokenScores(NamedTuple):
    """Chosen tokens' log-probabilities under the model's own logits (before penalties, temperature and
    filters, as vLLM reports them) and the most likely alternatives: [..., K] with K = min(TOP_LOGPROBS,
    vocab), highest first."""

    # NOTE: jax arrays on the device, NumPy arrays once an engine copies them to the host
    logprob: Any  # [...] float32
    top_ids: Any  # [..., K] int32
    top_logprobs: Any  # [..., K] float32

    def at(self, *index) -> TokenScores:
        """The scores at `index` of the leading axes (a row's, a row's step's), as NumPy arrays."""
        # NOTE: indexed on the host: indexing a device array compiles a program per shape, and a server's first
        # request that wanted log-probabilities waited for three of them
        return TokenScores(*(np.asarray(a)[index] for a in self))


def no_scores(shape: tuple[int, ...], vocab: int) -> TokenScores:
    k = min(TOP_LOGPROBS, vocab)
    return TokenScores(
        jnp.zeros(shape, jnp.float32), jnp.zeros(shape + (k,), jnp.int32), jnp.zeros(shape + (k,), jnp.float32)
    )


def token_scores(logits, tokens, wanted) -> TokenScores:
    """The tokens' [B] TokenScores under logits [B, V]; zeros (the work skipped at run time) unless a row is
    `wanted` [B]. The log_softmax sums in a fixed order, so a row's values do not depend on its company."""

    def scored(logits):
        log_probs = fixed_order.log_softmax(logits.astype(jnp.float32))
        top, ids = lax.top_k(log_probs, min(TOP_LOGPROBS, logits.shape[-1]))
        chosen = jnp.take_along_axis(log_probs, tokens[:, None].astype(jnp.int32), axis=-1)[:, 0]
        return TokenScores(chosen, ids.astype(jnp.int32), top)

    return lax.cond(jnp.any(wanted), scored, lambda x: no_scores(x.shape[:1], x.shape[-1]), logits)


def seen_tokens(ids, vocab_size: int):
    """[batch, vocab] bool: which ids occur in each row of ids [batch, length]."""
    rows = jnp.arange(ids.shape[0])[:, None]
    return jnp.zeros((ids.shape[0], vocab_size), bool).at[rows, ids].set(True)


def mark_seen(seen, tokens):
    return seen.at[jnp.arange(seen.shape[0]), tokens].set(True)


def processed(logits, p: RowParams, seen, generated, eos_ids: tuple[int, ...]):
    logits = logits.astype(jnp.float32)
    if eos_ids:
        # NOTE: a constrained row's grammar decides when it may end (min_new_tokens would fight its mask)
        early = (generated < p.min_new) & jnp.all(p.allowed == TM.ANY, axis=-1)
        ban = early[:, None] & jnp.isin(jnp.arange(logits.shape[-1]), jnp.asarray(eos_ids))[None]
        logits = jnp.where(ban, jnp.finfo(logits.dtype).min, logits)
    pen = p.penalty[:, None]
    penalised = jnp.where(logits < 0, logits * pen, logits / pen)
    return TM.masked(jnp.where(seen & (pen != 1.0), penalised, logits), p.allowed)


def top_k_filter(probs, k):
    k = jnp.clip(k, 1, probs.shape[-1])
    kth = jnp.take_along_axis(-jnp.sort(-probs, axis=-1), (k - 1)[:, None], axis=-1)
    return jnp.where(probs >= kth, probs, 0.0)


def top_p_filter(probs, p):
    order = jnp.argsort(-probs, axis=-1, stable=True)
    sorted_probs = jnp.take_along_axis(probs, order, axis=-1)
    crossed = lax.associative_scan(jnp.add, sorted_probs, axis=-1) > p[:, None]
    # NOTE: shifted by one place: the token whose probability takes the sum past p is kept
    drop_sorted = jnp.concatenate([jnp.zeros_like(crossed[:, :1]), crossed[:, :-1]], axis=-1)
    rows = jnp.arange(probs.shape[0])[:, None]
    drop = jnp.zeros_like(drop_sorted).at[rows, order].set(drop_sorted)
    return jnp.where(drop, 0.0, probs)


def _only_where(rows, filtered, probs):
    """filtered(probs) on `rows`, and its sorts skipped altogether when no row asks for it."""
    return lax.cond(jnp.any(rows), lambda q: jnp.where(rows[:, None], filtered(q), q), lambda q: q, probs)


def sampling_probs(logits, p: RowParams):
    probs = fixed_order.softmax(logits / p.temperature[:, None])
    probs = _only_where(p.top_k > 0, lambda q: top_k_filter(q, p.top_k), probs)
    return _only_where(p.top_p < 1.0, lambda q: top_p_filter(q, p.top_p), probs)


def choose(logits, p: RowParams, seen, generated, keys, eos_ids: tuple[int, ...]):
    """(tokens [B] int32, score terms [B] float32): greedy rows the argmax and its processed logit, sampled
    rows a draw from their own key and the log-probability before temperature."""
    logits = processed(logits, p, seen, generated, eos_ids)
    greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)

    def with_draws(logits):
        # NOTE: a batch of greedy rows skips this (softmaxes, the top-k/top-p sorts, the draws) at run time
        # (the token choice for 32 x 32000 logits on this CPU: 2.9 -> 2.6 ms)
        log_probs = fixed_order.log_softmax(logits)
        drawn = jax.vmap(jax.random.categorical)(keys, jnp.log(sampling_probs(logits, p))).astype(jnp.int32)
        tokens = jnp.where(p.sampling, drawn, greedy)
        terms = jnp.where(p.sampling[:, None], log_probs, logits)
        return tokens, jnp.take_along_axis(terms, tokens[:, None], axis=-1)[:, 0]

    def argmax_only(logits):
        return greedy, jnp.take_along_axis(logits, greedy[:, None], axis=-1)[:, 0]

    return lax.cond(jnp.any(p.sampling), with_draws, argmax_only, logits)
