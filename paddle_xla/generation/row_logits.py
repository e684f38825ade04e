"""The next token per row, each row with its own decode arguments: what a continuous batch needs.

logits.py chooses for a whole batch under one DecodeConfig, compiled in. A serving batch holds requests
that asked for different things (greedy or sampled, their own temperature, top_k, top_p, penalty,
min_new_tokens, seed), so here those are traced [batch] arrays and one program serves every mix.
The arithmetic is logits.py's, step for step, so a greedy row gets the tokens px.generate gives it:
a penalty of 1.0 and a temperature of 1.0 leave the values bit-identical, top-k 0 and top-p 1.0 filter
nothing. Each row draws from its own key, so its tokens do not depend on its neighbours. Paddle-free.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class RowParams(NamedTuple):
    sampling: jax.Array      # [B] bool
    temperature: jax.Array   # [B] float32
    top_k: jax.Array         # [B] int32, 0: off
    top_p: jax.Array         # [B] float32, 1.0: off
    penalty: jax.Array       # [B] float32 (repetition_penalty)
    min_new: jax.Array       # [B] int32 (min_new_tokens)


def row_params(batch: int) -> RowParams:
    """Every row greedy and unfiltered (each field its own buffer, as a donated state needs)."""
    return RowParams(jnp.zeros(batch, bool), jnp.ones(batch, jnp.float32), jnp.zeros(batch, jnp.int32),
                     jnp.full(batch, 1.0, jnp.float32), jnp.full(batch, 1.0, jnp.float32), jnp.zeros(batch, jnp.int32))


def processed(logits, p: RowParams, seen, generated, eos_ids: tuple[int, ...]):
    logits = logits.astype(jnp.float32)
    if eos_ids:
        ban = (generated < p.min_new)[:, None] & jnp.isin(jnp.arange(logits.shape[-1]), jnp.asarray(eos_ids))[None]
        logits = jnp.where(ban, jnp.finfo(logits.dtype).min, logits)
    pen = p.penalty[:, None]
    penalised = jnp.where(logits < 0, logits * pen, logits / pen)
    return jnp.where(seen & (pen != 1.0), penalised, logits)


def _top_k(probs, k):
    k = jnp.clip(k, 1, probs.shape[-1])
    kth = jnp.take_along_axis(-jnp.sort(-probs, axis=-1), (k - 1)[:, None], axis=-1)
    return jnp.where(probs >= kth, probs, 0.0)


def _top_p(probs, p):
    order = jnp.argsort(-probs, axis=-1, stable=True)
    sorted_probs = jnp.take_along_axis(probs, order, axis=-1)
    crossed = jnp.cumsum(sorted_probs, axis=-1) > p[:, None]
    # NOTE: shifted by one place: the token whose probability takes the sum past p is kept (logits.py)
    drop_sorted = jnp.concatenate([jnp.zeros_like(crossed[:, :1]), crossed[:, :-1]], axis=-1)
    rows = jnp.arange(probs.shape[0])[:, None]
    drop = jnp.zeros_like(drop_sorted).at[rows, order].set(drop_sorted)
    return jnp.where(drop, 0.0, probs)


def sampling_probs(logits, p: RowParams):
    probs = jax.nn.softmax(logits / p.temperature[:, None], axis=-1)
    probs = jnp.where((p.top_k > 0)[:, None], _top_k(probs, p.top_k), probs)
    return jnp.where((p.top_p < 1.0)[:, None], _top_p(probs, p.top_p), probs)


def choose(logits, p: RowParams, seen, generated, keys, eos_ids: tuple[int, ...]):
    """(tokens [B] int32, score terms [B] float32): greedy rows the argmax and its processed logit, sampled
    rows a draw from their own key and the log-probability before temperature (logits.py's terms)."""
    logits = processed(logits, p, seen, generated, eos_ids)
    greedy = jnp.argmax(logits, axis=-1)
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    drawn = jax.vmap(jax.random.categorical)(keys, jnp.log(sampling_probs(logits, p)))
    tokens = jnp.where(p.sampling, drawn, greedy)
    terms = jnp.where(p.sampling[:, None], log_probs, logits)
    return tokens.astype(jnp.int32), jnp.take_along_axis(terms, tokens[:, None], axis=-1)[:, 0]
