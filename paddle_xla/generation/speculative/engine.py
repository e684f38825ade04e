"""px.Generator.generate with speculative decoding: the target's prefill as BatchEngine makes it (and the
draft's, for draft_model), then device calls of up to `chunk` rounds (rounds.py) until every row has ended.
A row makes 1 to k + 1 tokens a round, so its tokens are gathered row by row and padded at the end, as
generate pads a row that ended early. Paddle-free."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from ... import x64
from .. import slots as SL
from ..batch_engine import BatchEngine, row_keys
from ..config import decode_config
from . import lookup
from . import rounds as RD
from .config import SpeculativeConfig

# NOTE: what a server's engine that does not speculate says of a speculative generator (continuous; paged,
# for a method it does not serve): it decodes a token a step
NOT_SERVED = "paddle_xla: this server engine does not speculate: it decodes one token a step (the same tokens)"


@dataclasses.dataclass
class SpeculativeStats:
    """What speculation has done since the generator was made: verify steps (one per live row and round),
    the guesses made and the guesses kept."""

    method: str
    verify_steps: int = 0
    guessed_tokens: int = 0
    accepted_tokens: int = 0

    @property
    def accepted_per_step(self) -> float:
        """Guesses kept per verify step (each step also makes the target's own next token)."""
        return self.accepted_tokens / self.verify_steps if self.verify_steps else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.guessed_tokens if self.guessed_tokens else 0.0

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.update(accepted_per_step=self.accepted_per_step, acceptance_rate=self.acceptance_rate)
        return out


class SpeculativeEngine:
    """Generates with `target` (its prefills and weights), verifying `config`'s guesses with `verify`: run(weights,
    ids [B, k+1], mask [B, S+k+1], pos [B, k+1], past) -> (logits [B, k+1, V], K/V [2L, B, H, k+1, D]).
    draft: the draft model's BatchEngine (draft_model), over the same rows, slots and vocabulary."""

    def __init__(
        self,
        target: BatchEngine,
        verify: Callable,
        config: SpeculativeConfig,
        draft: BatchEngine | None = None,
        draft_source: Any = None,
    ):
        self.target, self.verify, self.config, self.draft = target, verify, config, draft
        self.draft_source = draft_source  # NOTE: what built the draft's engine (px.Generator), for an export
        self.k = config.num_speculative_tokens
        self.stats = SpeculativeStats(config.method)
        self._runs: dict = {}
        k, width = self.k, target.geometry.max_length + self.k + 2

        def begin(target, draft, ids, mask):
            history = None if draft is not None else lookup.history(ids, mask, target.token, width)
            return RD.begin(target, k, draft, history)

        self._begin = jax.jit(begin)  # NOTE: compiled at the first generate

    def _guesser(self, eos) -> RD.Guesser:
        if self.draft is None:
            return RD.FromHistory(self.k, self.config.prompt_lookup_max, self.config.prompt_lookup_min)
        return RD.FromDraft(self.draft._step, self.k, eos)

    def _run_fn(self, eos, pad):
        if (eos, pad) not in self._runs:
            target = RD.Target(self.verify, self.target._step, plain_when_unguessed=self.draft is None)
            guesser, k, rounds = self._guesser(eos), self.k, self.target.geometry.chunk
            self._runs[(eos, pad)] = self.target._shown(
                f"speculative rounds ({self.config.method}, {k} guesses, {rounds} rounds a call)",
                jax.jit(lambda w, sp: RD.run(target, guesser, w, sp, rounds, k, eos, pad), donate_argnums=(1,)),
            )
        return self._runs[(eos, pad)]

    def generate(self, input_ids, attention_mask=None, seed: int | None = None, **kwargs):
        """(new token ids [batch, T] int64, mean scores [batch, 1] float32), as BatchEngine.generate."""
        eng = self.target
        cfg = decode_config(eng.defaults, **kwargs)
        ids, mask = eng._inputs(input_ids, attention_mask, cfg)
        batch = ids.shape[0]
        eng._check_lengths(ids.shape[1], mask, cfg)
        key = jax.random.PRNGKey(seed) if seed is not None else jax.random.fold_in(eng._key, next(eng._calls))
        eos, pad, b = tuple(cfg.eos_token_id), cfg.pad_token_id, eng.geometry.max_batch_size
        with x64.scope():
            weights = (eng._device_params(), None if self.draft is None else self.draft._device_params())
            live = np.arange(b) < batch
            keys = row_keys(key, b)
            state = eng._prefilled(weights[0], ids, mask, live, cfg, keys)
            drafted = None if self.draft is None else self.draft._prefilled(weights[1], ids, mask, live, cfg, keys)
            full_ids, full_mask = _rows(ids, mask, b, eng.geometry.max_length)
            sp = self._begin(state, drafted, full_ids, full_mask)
            rows = [[int(t)] if on else [] for t, on in zip(np.asarray(state.token), live)]
            run = self._run_fn(eos, pad)
            while bool(np.asarray(sp.target.live).any()):
                sp, out = run(weights, sp)
                for r, made in enumerate(np.asarray(out)):
                    rows[r].extend(int(t) for t in made if t != SL.NO_TOKEN)
            scores = np.asarray(sp.target.scores)
            self._count(sp.tally, batch)
        width = max(len(r) for r in rows[:batch])
        out = np.full((batch, width), pad, np.int64)
        for r in range(batch):
            out[r, : len(rows[r])] = rows[r]
        return out, scores[:batch, None].astype(np.float32)

    def _count(self, tally: RD.Tally, batch: int) -> None:
        self.stats.verify_steps += int(np.asarray(tally.steps)[:batch].sum())
        self.stats.guessed_tokens += int(np.asarray(tally.guessed)[:batch].sum())
        self.stats.accepted_tokens += int(np.asarray(tally.kept)[:batch].sum())

    def warm_up(self, buckets=None, **kwargs) -> None:
        """Compile every bucket's prefill (the target's and the draft's) and the rounds, for these arguments."""
        g = self.target.geometry
        for bucket in buckets or g.buckets:
            self.generate(np.ones((1, bucket), np.int64), max_new_tokens=2 if bucket < g.max_length else 1, **kwargs)
        if g.prefill_chunk is not None and g.chunked and buckets is None:
            self.generate(np.ones((1, g.prefill_chunk + 1), np.int64), max_new_tokens=1, **kwargs)
        self.stats = SpeculativeStats(self.config.method)  # NOTE: the counts start with the user's calls


def _rows(ids, mask, rows: int, width: int):
    """ids and mask [B, w] in one shape for every call, [rows, width]: padding rows below, padding columns on the
    right (the prompt lookup's history takes a prompt's real tokens wherever they are)."""
    out = np.zeros((rows, width), np.int64)
    m = np.zeros((rows, width), np.int64)
    out[: ids.shape[0], : ids.shape[1]], m[: ids.shape[0], : ids.shape[1]] = ids, mask
    return out, m
