"""Which tokens a row may make next: a bitmask per row, for constrained decoding (structured output).

A mask is int32 [ceil(vocab / 32)], token t allowed where bit t % 32 of word t // 32 is set (the layout
llguidance's and xgrammar's bitmasks have), -1 everywhere: no constraint. The host computes a constrained
row's mask from its grammar after each token (TokenConstraint: serve/llm/structured.py wraps a grammar
engine's matcher), and the decode step applies it on the device before the row's token is chosen: the
logits of a token it leaves out become the lowest float, so neither argmax nor a draw picks it. The engine
then runs one-step decode rounds while a constrained row runs (paged_engine.py), since the next mask
depends on the token just made. Paddle-free.
"""

from __future__ import annotations

from typing import Protocol

import jax.numpy as jnp
import numpy as np
from jax import lax

ANY = -1  # NOTE: a word with every bit set: all 32 of its tokens allowed


class TokenConstraint(Protocol):
    """One row's grammar state on the host."""

    def allowed(self) -> np.ndarray:
        """The mask of the tokens that may come next: int32 [words(vocab)]."""
        ...

    def accept(self, token: int) -> None:
        """The row made `token`: advance past it."""
        ...


def words(vocab: int) -> int:
    return (vocab + 31) // 32


def unconstrained(rows: int, vocab: int) -> np.ndarray:
    """Masks [rows, words(vocab)] that allow every token."""
    return np.full((rows, words(vocab)), ANY, np.int32)


def allowing(ids, vocab: int) -> np.ndarray:
    """The mask [words(vocab)] that allows `ids` alone (allowed_tokens' inverse)."""
    bits = np.zeros(words(vocab) * 32, np.uint8)
    bits[np.asarray(ids, np.int64)] = 1
    return np.packbits(bits, bitorder="little").view("<i4").astype(np.int32)


def allowed_tokens(mask: np.ndarray, vocab: int) -> np.ndarray:
    """The ids a host-side mask [words] allows (for checks and tests)."""
    bits = np.unpackbits(np.ascontiguousarray(mask, "<i4").view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[:vocab])


def masked(logits, allowed):
    """logits [B, V] with the tokens that `allowed` [B, words(V)] leaves out at the lowest float; skipped at
    run time when no row is constrained."""

    def apply(logits):
        # NOTE: each word's 32 bits side by side, int32 throughout (no [B, V] gather, no int64 under x64)
        bits = (allowed[:, :, None] >> jnp.arange(32, dtype=jnp.int32)) & 1
        bit = bits.reshape(allowed.shape[0], -1)[:, : logits.shape[-1]]
        return jnp.where(bit == 1, logits, jnp.finfo(logits.dtype).min)

    return lax.cond(jnp.any(allowed != ANY), apply, lambda x: x, logits)
