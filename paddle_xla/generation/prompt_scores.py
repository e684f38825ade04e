"""A prompt's own log-probabilities: each token's under the model given the tokens before it, and each
position's most likely next tokens (OpenAI's `echo` with `logprobs`, vLLM's prompt_logprobs; what
lm-evaluation-harness's loglikelihood requests ask).

One program, compiled at warm-up: the generator's batch-1 extend program with the LM head on every position
(all_logits.py), run over the prompt in prefill_chunk pieces from its first token (the last piece padded on
the right: padding after a token changes nothing a causal model computes for it) into a batch-1 cache of its
own; or, where prompts are not chunked (every prompt fits the largest prefill bucket), that bucket's batch-1
prefill with every position's logits. The engine's own cache and rows are not touched. Values are log_softmax
of the model's logits summed in a fixed order (row_logits.token_scores), as a generated token's are.
Paddle-free."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .. import x64
from . import row_logits as R
from . import slots as SL
from .all_logits import ALL_LOGITS
from .batch_engine import padded


class PromptScorer:
    """scores(weights, ids) -> TokenScores [T] on the host: entry t is ids[t + 1]'s log-probability after ids[:t
    + 1] and position t's top alternatives (the last entry's logprob is meaningless: no token follows)."""

    def __init__(self, geometry, program_of: Callable[[str], Callable]):
        self.geometry, self._program_of = geometry, program_of
        self._fn: Callable | None = None  # NOTE: made when first run (a live generator captures its Graph then)

    def _program(self) -> Callable:
        if self._fn is None:
            g = self.geometry
            if g.chunked:
                extend = self._program_of(ALL_LOGITS + "extend1")
                self._fn = jax.jit(lambda *args: _chunk(extend, *args))
            else:
                prefill = self._program_of(f"{ALL_LOGITS}prefill1_{g.buckets[-1]}")
                self._fn = jax.jit(lambda *args: _whole(prefill, *args))
        return self._fn

    def __call__(self, weights, ids) -> R.TokenScores:
        ids = [int(i) for i in ids]
        targets = ids[1:] + [0]
        with x64.scope():
            parts = (
                self._chunked(weights, ids, targets) if self.geometry.chunked else self._bucket(weights, ids, targets)
            )
        return R.TokenScores(*(np.asarray(a) for a in parts))

    def _bucket(self, weights, ids, targets):
        width = self.geometry.buckets[-1]
        mask = np.ones((1, len(ids)), np.int64)
        row, m = padded(np.asarray([ids], np.int64), mask, width, 1, 0)
        # NOTE: left-padded as a prefill is; the prompt's positions are the last len(ids)
        t = np.zeros((1, width), np.int32)
        t[0, width - len(ids) :] = targets
        scores = self._program()(weights, row, m, t)
        return [np.asarray(a)[width - len(ids) :] for a in scores]

    def _chunked(self, weights, ids, targets):
        g, c = self.geometry, self.geometry.prefill_chunk
        view = SL.empty((2 * g.layers, 1, g.kv_heads, g.max_length, g.head_dim), g.cache_dtype, g.vocab_size)
        parts = []
        for start in range(0, len(ids), c):
            n = min(c, len(ids) - start)
            row, mask, t = (np.zeros((1, c), dtype) for dtype in (np.int64, np.int64, np.int32))
            row[0, :n], mask[0, :n], t[0, :n] = ids[start : start + n], 1, targets[start : start + n]
            view, scores = self._program()(weights, view, row, mask, np.bool_(start == 0), t)
            parts.append([np.asarray(a)[:n] for a in scores])
        return [np.concatenate(p) for p in zip(*parts)]


def _whole(prefill: Callable, weights, ids, mask, targets) -> R.TokenScores:
    logits, _ = prefill(weights, ids, mask, SL.prompt_positions(mask))
    return R.token_scores(logits[0], targets[0], jnp.ones(ids.shape[1], bool))


def _chunk(extend: Callable, weights, view: SL.Slots, ids, mask, fresh, targets):
    feeds, kept = SL.chunk_feeds(view, ids, mask, jnp.reshape(fresh, (1,)))
    logits, kv = extend(weights, *feeds)
    view = SL.chunk_written(view, kept, kv, mask)
    return view, R.token_scores(logits[0], targets[0], jnp.ones(ids.shape[1], bool))
