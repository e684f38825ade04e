"""A server's engine that speculates: generation/paged_engine.py's PagedEngine whose decode chunks are
speculative rounds (paged_rounds.py) by prompt lookup ("ngram"), the rows of a round verified together.

Everything else is the paged engine's: blocks, prefix cache, prefill, buckets, constrained rows (which guess
nothing: their grammar's next mask needs each token). A chunk runs up to `chunk` rounds, so a row makes
chunk to chunk x (k + 1) tokens a device call, and its bucket's blocks hold the most it can keep. The counts
(verify steps, guesses made and kept) add up in `stats`, as px.Generator's speculative_stats.
Paddle-free."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable

import jax
import numpy as np

from ... import x64
from ..paged_engine import PagedEngine
from . import paged_rounds as PR
from .config import SpeculativeConfig
from .engine import NOT_SERVED, SpeculativeStats


class SpeculativePagedEngine(PagedEngine):
    """PagedEngine(*args, **kwargs) whose decode chunks verify `config`'s guesses (method "ngram") with
    `verify`: run(weights, ids [R, k + 1], mask [R, S + k + 1], pos [R, k + 1], past) -> (logits [R, k + 1, V],
    K/V [2L, R, H, k + 1, D]), captured with symbolic rows and slots."""

    chunk_name = "speculative chunk"

    def __init__(self, *args, verify: Callable, config: SpeculativeConfig, **kwargs):
        super().__init__(*args, **kwargs)
        g = self.geometry
        self.config, self._verify = config, verify
        self.shape = PR.Lookup(config.num_speculative_tokens, config.prompt_lookup_max, config.prompt_lookup_min,
                               g.max_length)  # fmt: skip
        self.history_width = g.max_length + self.shape.k + 2
        # NOTE: a chunk's bucket holds the most its rounds may keep, so a smaller one is never run (nor compiled)
        least = min(-(-(1 + self.chunk_tokens) // self.block_size), self.table_width)
        self.block_buckets = tuple(b for b in self.block_buckets if b >= least) or (self.table_width,)
        self.stats = SpeculativeStats(config.method)
        self._side: PR.Side | None = None
        self._spec_runs: dict = {}
        self._begun = jax.jit(PR.begun, donate_argnums=(0,))

    @property
    def chunk_tokens(self) -> int:
        return self.geometry.chunk * (self.shape.k + 1)

    def serving_shape(self):
        """PagedEngine's, each step computing k + 1 positions per row (its logits, and the K/V kept pending)."""
        return dataclasses.replace(super().serving_shape(), positions=self.shape.k + 1)

    def _sides(self) -> PR.Side:
        if self._side is None:
            g = self.geometry
            with x64.scope():
                self._side = PR.empty_side(2 * g.layers, g.kv_heads, g.head_dim, g.cache_dtype, self.max_seqs,
                                           self.shape.k, self.history_width)  # fmt: skip
        return self._side

    def _decoding(self, row: int, prompt: tuple[int, ...], token: int) -> None:
        tokens = np.zeros(self.history_width, np.int32)
        tokens[: len(prompt)], tokens[len(prompt)] = prompt, token
        self._side = self._begun(self._sides(), np.int32(row), tokens, np.int32(len(prompt) + 1))

    def _spec_fn(self, rows: int, blocks: int):
        if (rows, blocks) not in self._spec_runs:
            verify, decode, shape = self._verify, self._decode, self.shape
            eos, pad, rounds = self.eos, self.defaults.pad_token_id, self.geometry.chunk

            def run(w, state, side, index, tables, steps, allowed, guess_on):
                return PR.run(verify, decode, w, state, side, index, tables, steps, allowed, guess_on, shape, rounds,
                              eos, pad)  # fmt: skip

            self._spec_runs[(rows, blocks)] = jax.jit(run, donate_argnums=(1, 2))
        return self._spec_runs[(rows, blocks)]

    def _decode_chunk(self, index, tables, steps, allowed, constrained: list[int]):
        rows, blocks = tables.shape
        guess_on = np.ones(rows, bool)
        guess_on[constrained] = False
        self._state, self._side, made, scores, counts = self._spec_fn(rows, blocks)(
            self._weights_on_device(), self._paged(), self._sides(), index, tables, steps, allowed, guess_on
        )
        steps_run, guessed, kept = (int(c) for c in np.asarray(counts))
        self.stats.verify_steps += steps_run
        self.stats.guessed_tokens += guessed
        self.stats.accepted_tokens += kept
        return made, scores

    def _invariant_row_buckets(self) -> tuple[int, ...]:
        """The decode step's row buckets (PagedEngine's check) whose verify step also gives each row the numbers
        of max_batch_size rows to the bit (logits and K/V of every position, on the same random blocks)."""
        kept = super()._invariant_row_buckets()
        full, most = self.geometry.max_batch_size, self.row_buckets[-1]
        tables = np.arange(1, most + 1, dtype=np.int32)[:, None]
        verify, decode, shape = self._verify, self._decode, self.shape

        def numbers(w, state, rows, tables):
            s = PR.PG._rows(state.seqs, rows)
            guesses = (3 + rows[:, None] + np.arange(shape.k)[None]).astype(np.int32) % self.geometry.vocab_size
            return PR._verified(verify, decode, w, state.pool, s, tables, guesses, shape)

        probe = jax.jit(numbers)
        with x64.scope():
            state, w = self._probe_state(most), self._weights_on_device()
            got = {
                r: jax.tree.map(np.asarray, probe(w, state, np.arange(r, dtype=np.int32), tables[:r]))
                for r in sorted(set(kept) | {full})
            }
        logits, kv = got[full]

        def same(r):
            n = min(r, full)
            return np.array_equal(got[r][0][:n], logits[:n]) and all(
                np.array_equal(a[:n], b[:n]) for a, b in zip(got[r][1], kv)
            )

        return tuple(r for r in kept if r == full or same(r))

    def warm_up(self) -> None:
        super().warm_up()
        with x64.scope():  # NOTE: a request's history goes in by its own program (warm-up's may all have ended)
            empty = np.zeros(self.history_width, np.int32)
            self._side = self._begun(self._sides(), np.int32(self.max_seqs), empty, np.int32(0))
        self.stats = SpeculativeStats(self.config.method)  # NOTE: the counts start with the first request


def paged_engine_type(speculative, verify_any: Callable[[int], Callable] | None) -> Callable[..., PagedEngine]:
    """What paged_engine makes a server's engine with, for a generator's SpeculativeEngine (None: it has
    none): a SpeculativePagedEngine verifying over `verify_any(k + 1)` (the verify program with symbolic
    rows and slots; None: the generator has none, an artifact exported before it), where the method is
    served; else the plain engine, with a warning (the same tokens, a token a step)."""
    if speculative is None:
        return PagedEngine
    if speculative.config.method != "ngram" or verify_any is None:
        why = (
            "an artifact exported before served speculation" if speculative.config.method == "ngram" else "draft_model"
        )
        warnings.warn(f"{NOT_SERVED} ({why}; served: method='ngram')", stacklevel=3)
        return PagedEngine
    verify = verify_any(speculative.k + 1)
    return functools.partial(SpeculativePagedEngine, verify=verify, config=speculative.config)
