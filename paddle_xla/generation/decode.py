"""The decode loop: a prefill, then many decode steps per host call, over a fixed-size KV cache.

Shapes never change while generating: the cache holds `slots` positions for every row
([2 * layers, batch, kv_heads, slots, head_dim]); `valid` [batch, slots] marks the filled ones, and the
attention mask of a step is `valid` plus the new token. Prompts are left-padded to a bucket length P;
their K/V fill slots [0, P), and the token generated at step t (t = 0 from the prefill) has its K/V
written into slot P + t by the step that consumes it. Positions follow PaddleFormers: cumsum of the
mask minus one for the prompt (1 on padding), then one more per generated token.

`run` advances every row up to `stop_at` tokens inside one lax.while_loop, which also stops once no
row is unfinished (the EOS test runs on the device), so the host calls it once per chunk.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from . import logits as L
from .config import DecodeConfig


class Programs(NamedTuple):
    prefill: Callable   # (params, ids [B,P], mask [B,P], pos [B,P]) -> (logits [B,V], kv [2L,B,H,P,D])
    step: Callable      # (params, ids [B,1], mask [B,S+1], pos [B,1], past) -> (logits [B,V], new [2L,B,H,D])


class State(NamedTuple):
    past: jax.Array         # [2L, B, H, S, D]
    valid: jax.Array        # [B, S] int64: 1 where a slot holds a real token's K/V
    token: jax.Array        # [B] the last token, not yet in the cache
    position: jax.Array     # [B] its position id
    unfinished: jax.Array   # [B] bool
    scores: jax.Array       # [B] float32: the running mean of score terms
    seen: jax.Array         # [B, V] bool: ids each row has held (for repetition_penalty)
    out: jax.Array          # [B, S] int64: generated tokens, pad where not (yet) generated
    t: jax.Array            # () int32: tokens generated so far (the same for every row)
    prompt_len: jax.Array   # () int32: P, the first slot after the prompts
    key: jax.Array


def prompt_positions(mask):
    pos = jnp.cumsum(mask, axis=-1) - 1
    return jnp.where(mask == 0, 1, pos)


def start(programs: Programs, params, ids, mask, live, slots: int, cfg: DecodeConfig, key, cache_dtype) -> State:
    """Prefill the prompts (left-padded to P) and choose the first token. `live` [B] is False for the
    rows that only fill the batch: they count as finished from the start, so they never keep the loop going."""
    batch, p = ids.shape
    logits, kv = programs.prefill(params, ids, mask, prompt_positions(mask))
    past = jnp.zeros(kv.shape[:3] + (slots,) + kv.shape[4:], cache_dtype)
    past = lax.dynamic_update_slice_in_dim(past, kv.astype(cache_dtype), 0, axis=3)
    valid = jnp.zeros((batch, slots), mask.dtype).at[:, :p].set(mask)
    seen = L.seen_tokens(ids, logits.shape[-1])
    key, sub = jax.random.split(key)
    token, term = L.choose(logits, cfg, seen, 0, sub)
    token, scores, unfinished = L.finish(token, term, jnp.zeros(batch, jnp.float32), live, 0, cfg)
    out = jnp.full((batch, slots), cfg.pad_token_id, jnp.int64).at[:, 0].set(token)
    return State(past, valid, token, jnp.sum(mask, axis=-1).astype(jnp.int64), unfinished, scores,
                 L.mark_seen(seen, token), out, jnp.asarray(1, jnp.int32), jnp.asarray(p, jnp.int32), key)


def step(programs: Programs, params, s: State, cfg: DecodeConfig) -> State:
    """One decode step: the last token's K/V into its slot, and the next token chosen."""
    batch, slots = s.valid.shape
    mask = jnp.concatenate([s.valid, jnp.ones((batch, 1), s.valid.dtype)], axis=-1)
    logits, new = programs.step(params, s.token[:, None].astype(jnp.int64), mask, s.position[:, None], s.past)
    slot = s.prompt_len + s.t - 1
    past = lax.dynamic_update_slice_in_dim(s.past, new[:, :, :, None].astype(s.past.dtype), slot, axis=3)
    valid = lax.dynamic_update_slice_in_dim(s.valid, jnp.ones((batch, 1), s.valid.dtype), slot, axis=1)
    key, sub = jax.random.split(s.key)
    token, term = L.choose(logits, cfg, s.seen, s.t, sub)
    token, scores, unfinished = L.finish(token, term, s.scores, s.unfinished, s.t, cfg)
    out = lax.dynamic_update_slice_in_dim(s.out, token[:, None].astype(s.out.dtype), s.t, axis=1)
    return State(past, valid, token, s.position + 1, unfinished, scores, L.mark_seen(s.seen, token), out,
                 s.t + 1, s.prompt_len, key)


def run(programs: Programs, params, s: State, stop_at, cfg: DecodeConfig) -> State:
    """Decode steps until `stop_at` tokens are generated or every row has ended."""
    def more(s):
        going = s.t < stop_at
        return going & jnp.any(s.unfinished) if cfg.eos_token_id else going
    return lax.while_loop(more, lambda s: step(programs, params, s, cfg), s)
