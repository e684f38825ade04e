"""Prompt lookup (vLLM's and FastDeploy's "ngram"): a row's guesses are the tokens that followed an earlier
occurrence of its newest n tokens in its own history (prompt and generated), the longest n from
prompt_lookup_max down to prompt_lookup_min that occurs. No second model. Every row is searched at once, on
the device, in fixed shapes. Paddle-free."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

NONE = -1  # a guess that is not made: it never equals a token, so verification stops before it


class History(NamedTuple):
    tokens: jax.Array  # [B, W] int32: the row's tokens, prompt first, its last (not yet in the cache) at len - 1
    length: jax.Array  # [B] int32


def history(ids, mask, token, width: int) -> History:
    """The rows' histories: the real tokens of their prompts (ids, mask [B, P], padding anywhere) then `token`."""
    rows = jnp.arange(ids.shape[0])[:, None]
    at = jnp.where(mask != 0, jnp.cumsum(mask, axis=-1) - 1, width)
    tokens = jnp.zeros((ids.shape[0], width), jnp.int32).at[rows, at].set(ids.astype(jnp.int32), mode="drop")
    length = jnp.sum(mask != 0, axis=-1).astype(jnp.int32)
    return appended(History(tokens, length), token[:, None].astype(jnp.int32))


def appended(h: History, made) -> History:
    """h with each row's made tokens (made [B, n], NONE where a row made none) after its history."""
    rows = jnp.arange(made.shape[0])[:, None]
    real = made >= 0
    at = jnp.where(real, h.length[:, None] + jnp.cumsum(real, axis=-1) - 1, h.tokens.shape[1])
    tokens = h.tokens.at[rows, at].set(made.astype(jnp.int32), mode="drop")
    return History(tokens, h.length + jnp.sum(real, axis=-1).astype(jnp.int32))


def guesses(h: History, k: int, longest: int, shortest: int):
    """[B, k] int32: for each row, the k tokens after an earlier occurrence of its newest n tokens (the latest that
    k tokens follow, else the earliest), n the longest of longest..shortest that occurs; NONE past the
    history's end or where nothing occurs."""
    batch, width = h.tokens.shape
    starts = jnp.arange(width)
    follow = jnp.full(batch, -1, jnp.int32)  # NOTE: where the guesses begin in the history; -1: none yet
    for n in range(longest, shortest - 1, -1):
        suffix = jnp.take_along_axis(h.tokens, jnp.maximum(h.length[:, None] - n + jnp.arange(n), 0), axis=1)
        same = jnp.ones((batch, width), bool)
        for i in range(n):
            shifted = jnp.take(h.tokens, jnp.minimum(starts + i, width - 1), axis=1)
            same &= shifted == suffix[:, i : i + 1]
        # NOTE: an occurrence must end before the suffix itself does (one token at least follows it)
        same &= (starts[None] + n < h.length[:, None]) & (h.length[:, None] > n)
        # NOTE: the latest occurrence that k tokens follow, else the earliest (the most tokens follow it): in a
        # loop the latest occurrence ends where the history does and would guess one token
        whole = same & (starts[None] + n + k <= h.length[:, None])
        latest = jnp.max(jnp.where(whole, starts[None], -1), axis=1)
        earliest = jnp.min(jnp.where(same, starts[None], width), axis=1)
        found = jnp.where(latest >= 0, latest, jnp.where(earliest < width, earliest, -1))
        follow = jnp.where((follow < 0) & (found >= 0), found + n, follow)
    at = follow[:, None] + jnp.arange(k)
    made = (follow[:, None] >= 0) & (at < h.length[:, None])
    return jnp.where(made, jnp.take_along_axis(h.tokens, jnp.clip(at, 0, width - 1), axis=1), NONE)
