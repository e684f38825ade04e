"""One decode step's choice of the next token, as PaddleFormers' `generate` makes it, in fixed shapes.

Pure JAX on [batch, vocab] float32 logits, so that the whole step can sit inside the device-side
decode loop. The order and arithmetic follow PaddleFormers 1.2 (`generation/utils.py` greedy_search
and sample, `generation/logits_process.py`):
1. min_new_tokens: while fewer tokens than that are generated, the EOS logit is the dtype's lowest.
2. repetition_penalty: every token id seen so far in the row (prompt, its padding and generated
   tokens) has its logit multiplied by the penalty if negative, divided by it otherwise.
3. greedy: the argmax; its score term is that processed logit (not a log-probability).
   sampling: the score term is log_softmax(processed logits) at the drawn token, taken before
   temperature; then logits / temperature, softmax, top-k on the probabilities (ties at the k-th
   value kept), top-p on what is left (sorted descending, a token is dropped once the cumulative
   probability *before* it exceeds top_p, so the token that crosses it stays), no renormalisation,
   and one draw from the remaining probability mass.
4. A finished row gets pad_token_id, and its score stops moving: the score is the running mean of
   the score terms up to and including the row's EOS.

`seen` replaces PaddleFormers' growing input_ids: a [batch, vocab] mask of the ids a row has held.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from .config import DecodeConfig


def seen_tokens(ids, vocab_size: int):
    """[batch, vocab] bool: which ids occur in each row of ids [batch, length]."""
    rows = jnp.arange(ids.shape[0])[:, None]
    return jnp.zeros((ids.shape[0], vocab_size), bool).at[rows, ids].set(True)


def mark_seen(seen, tokens):
    return seen.at[jnp.arange(seen.shape[0]), tokens].set(True)


def ban_eos(logits, cfg: DecodeConfig, generated: int | jax.Array):
    if not cfg.min_new_tokens or not cfg.eos_token_id:
        return logits
    lowest = jnp.finfo(logits.dtype).min
    eos = jnp.asarray(cfg.eos_token_id)
    return jnp.where(generated < cfg.min_new_tokens, logits.at[:, eos].set(lowest), logits)


def penalise_repeats(logits, seen, penalty: float):
    if penalty == 1.0:
        return logits
    penalised = jnp.where(logits < 0, logits * penalty, logits / penalty)
    return jnp.where(seen, penalised, logits)


def top_k_filter(probs, k: int):
    k = min(max(k, 1), probs.shape[-1])
    kth = lax.top_k(probs, k)[0][:, -1:]
    return jnp.where(probs >= kth, probs, 0.0)


def top_p_filter(probs, p: float):
    order = jnp.argsort(-probs, axis=-1, stable=True)
    sorted_probs = jnp.take_along_axis(probs, order, axis=-1)
    crossed = jnp.cumsum(sorted_probs, axis=-1) > p
    # NOTE: shifted by one place: the token whose probability takes the sum past p is kept
    drop_sorted = jnp.concatenate([jnp.zeros_like(crossed[:, :1]), crossed[:, :-1]], axis=-1)
    rows = jnp.arange(probs.shape[0])[:, None]
    drop = jnp.zeros_like(drop_sorted).at[rows, order].set(drop_sorted)
    return jnp.where(drop, 0.0, probs)


def sampling_probs(logits, cfg: DecodeConfig):
    """The (unnormalised) probabilities a sampled token is drawn from, after temperature, top-k, top-p."""
    if cfg.temperature != 1.0:
        logits = logits / cfg.temperature
    probs = jax.nn.softmax(logits, axis=-1)
    if cfg.top_k:
        probs = top_k_filter(probs, cfg.top_k)
    if cfg.top_p < 1.0:
        probs = top_p_filter(probs, cfg.top_p)
    return probs


def processed_logits(logits, cfg: DecodeConfig, seen, generated):
    logits = ban_eos(logits.astype(jnp.float32), cfg, generated)
    return penalise_repeats(logits, seen, cfg.repetition_penalty)


def choose(logits, cfg: DecodeConfig, seen, generated, key):
    """(next tokens [batch] int32, score terms [batch] float32) for logits [batch, vocab]."""
    logits = processed_logits(logits, cfg, seen, generated)
    if not cfg.sampling:
        tokens = jnp.argmax(logits, axis=-1)
        return tokens.astype(jnp.int32), jnp.take_along_axis(logits, tokens[:, None], axis=-1)[:, 0]
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    probs = sampling_probs(logits, cfg)
    tokens = jax.random.categorical(key, jnp.log(probs), axis=-1)
    return tokens.astype(jnp.int32), jnp.take_along_axis(log_probs, tokens[:, None], axis=-1)[:, 0]


def finish(tokens, terms, scores, unfinished, generated, cfg: DecodeConfig):
    """Pads finished rows, moves the running-mean scores of unfinished ones, and ends rows at EOS.

    Returns (tokens, scores, unfinished) after this step's token; `generated` counts the tokens
    before it (the same for every row, as PaddleFormers' step counter is)."""
    tokens = jnp.where(unfinished, tokens, cfg.pad_token_id)
    n = jnp.asarray(generated, jnp.float32)
    scores = jnp.where(unfinished, (scores * n + terms) / (n + 1), scores)
    if cfg.eos_token_id:
        unfinished = unfinished & ~jnp.isin(tokens, jnp.asarray(cfg.eos_token_id))
    return tokens, scores, unfinished
