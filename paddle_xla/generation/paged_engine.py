"""PagedEngine: continuous batching over a paged KV cache, each decode chunk in the smallest bucket that holds
its rows. The host side of paged.py; a server's scheduler (serve/llm/scheduler.py) drives it as it drives a
ContinuousEngine (the same calls: begin, fill, run_chunk, free). Paddle-free.

- **Blocks.** The cache is a pool of `num_blocks` blocks of `block_size` slots (blocks.py keeps the tables).
  A request reserves the blocks of its prompt and max_new_tokens when it begins, and gives them back when it
  ends or is cancelled. A request waits while its blocks are not free (`fits_now`); one that can never fit
  is refused (`check`).
- **Buckets.** A decode chunk runs R rows over N blocks per row, N the smallest of 1, 2, 4, ... blocks that
  holds every row's cache after the chunk: a short context reads a few blocks, not max_length slots. The
  attention sums in a fixed block order (ops/grouped_attention.py), so N never changes a row's numbers.
- **Rows.** R is the smallest row bucket that holds the running sequences, up to max_seqs (which may exceed
  max_batch_size: short requests run more at once in the same memory). Batch-invariant (the default), the
  buckets are 2, 4, ... max_seqs, and a row's numbers are those of px.Generator.generate on its prompt
  alone (generate's decode runs max_batch_size rows), whatever its company and its bucket: a float32
  weight held as [N, K] gives a row the same product bits at any 2 to 160 rows (one row is a matrix-vector
  product, rounded otherwise: so no bucket of 1), and the sums that XLA:CPU rounded by row count (a mean,
  a softmax, a decode step's score against its own key) run in a fixed order (ops/fixed_order.py).
  warm_up checks it: a bucket whose step does not give a row the logits, K/V, token and score of a
  max_batch_size-row step to the bit (another device, an int8 or half weight, a norm lowered otherwise)
  is dropped, and steps run in the buckets that do. Not batch-invariant, the buckets are 1, 2, 4, ...
  max_seqs (a lone request runs one row, at the offline batch-1 generator's pace), and a row's tokens may
  differ from generate's where two candidates' logits are within a rounding. Each (R, N) is one compiled
  program, all compiled by warm_up.
- **Prefill** is continuous.py's (a prompt alone, its bucket's batch-1 prefill, or the extend program a
  chunk at a time, into a batch-1 view), then its view's filled slots go into its blocks (paged.commit).
- **Prefix cache** (on by default). A prompt longer than a prefill chunk is cut into whole chunks from its
  first token (batch_engine.chunk_layout), so a chunk's K/V are the same numbers in every prompt that
  begins with the same tokens. Its whole chunks' blocks are registered once written (blocks.py: a hash
  chain, LRU); a later prompt that begins with them takes them into a view (paged.prefix_view) and
  prefills from the next chunk on, the cold prompt's remaining chunks exactly: a hit changes no number.
  Hits come in whole prefill chunks, and only prompts longer than one chunk hit.
- **Constrained rows** (a Request's TokenConstraint: structured output). Each token of such a row is chosen
  under its grammar's mask (token_masks.py), and the next mask needs that token: while one runs, the decode
  chunk program runs one step (its step count is traced, so no other program), and the host advances the
  grammars between steps. The other rows decode beside it, a token per round."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from .. import x64
from ..errors import GenerationError
from ..planner.serving import ServingShape, kv_token_bytes, pool_tokens
from ..runtime.compile_cache import ensure_compile_cache
from . import derive
from . import paged as PG
from . import row_logits as R
from . import slots as SL
from . import token_masks as TM
from .batch_engine import powers_of_two
from .blocks import BlockPool, PrefixCacheStats
from .config import DecodeConfig
from .continuous import (
    Filling,
    Request,
    ScoresOut,
    checked,
    compile_progress_lines,
    made_on_first_call,
    prefill_steps,
    request_key,
    request_params,
)
from .prompt_scores import PromptScorer


@dataclass
class _Fill(Filling):
    """continuous.py's prompt on its way in, with its batch-1 view so far and its prompt's length."""

    tokens: int = 0
    view: SL.Slots | None = None
    hit: int = 0  # leading prompt tokens whose K/V came from the prefix cache
    prompt: tuple[int, ...] = ()
    choices: int = 1  # NOTE: the request's choices (n): the first one prefilled keeps its prompt for the others
    total_steps: int = 0  # NOTE: its prefill steps when begun (all of them still to run: another may share)
    kept: tuple = ()  # NOTE: after its last prefill step: the prompt's last logits and seen ids (another_choice)


@dataclass
class _SharedPrompt:
    """A prompt prefilled for one choice of a request, kept for its other choices (each a request of its own,
    begun beside it): its batch-1 view, last logits and seen ids before the first token."""

    prompt: tuple[int, ...]
    left: int  # NOTE: choices still to take it; dropped at 0
    view: SL.Slots
    logits: jax.Array
    seen: jax.Array


class PagedEngine:
    """geometry: the generator's (max_length caps one request); decode: the decode program captured with
    symbolic rows and slots; prefill1_for(bucket), extend1: the batch-1 prefill programs continuous.py uses;
    batch_invariant, max_seqs: the module docstring's Rows (batch-invariant, max_seqs is at least max_batch_size)."""

    def __init__(
        self,
        geometry,
        defaults: DecodeConfig,
        decode: Callable,
        prefill1_for: Callable[[int], Callable],
        weights: Mapping,
        num_blocks: int,
        block_size: int = 16,
        max_seqs: int | None = None,
        seed: int = 0,
        place: Callable | None = None,
        extend1: Callable | None = None,
        batch_invariant: bool = True,
        prefix_cache: bool = True,
        prompt_scorer: PromptScorer | None = None,
    ):
        if geometry.chunked and extend1 is None:
            raise GenerationError(f"prefill_chunk={geometry.prefill_chunk} needs the batch-1 extend program")
        ensure_compile_cache()
        self.geometry, self.defaults = geometry, defaults
        # NOTE: a prefix's K/V are the same numbers in every prompt only at prefill-chunk boundaries
        # (batch_engine.chunk_layout), so hits come in whole chunks, and only prompts that are chunked hit
        self.prefix_cache = prefix_cache and geometry.chunked and geometry.prefill_chunk % block_size == 0
        granule = geometry.prefill_chunk // block_size if self.prefix_cache else 1
        self.blocks = BlockPool(num_blocks, block_size, prefix_cache=self.prefix_cache, granule=granule)
        self.block_size = block_size
        self.batch_invariant = batch_invariant
        # NOTE: batch-invariant, generate's max_batch_size rows are a bucket: its step is what every row must match
        self.max_seqs = (
            max(max_seqs or 0, geometry.max_batch_size) if batch_invariant else max_seqs or geometry.max_batch_size
        )
        self.row_buckets = powers_of_two(min(2 if batch_invariant else 1, self.max_seqs), self.max_seqs)
        # NOTE: warm_up checks the row buckets once (the module docstring's Rows)
        self.checks_rows = batch_invariant and self.row_buckets != (geometry.max_batch_size,)
        self._rows_checked = False
        self.table_width = -(-(geometry.max_length + 1) // block_size)  # NOTE: prompt + new tokens, one spare
        self.block_buckets = block_buckets(self.table_width)
        self._decode, self._prefill1_for, self._extend1 = decode, prefill1_for, extend1
        self._weights, self._place = dict(weights), place or jax.device_put
        self._params = None
        self._state: PG.Paged | None = None
        self._runs: dict = {}
        self._starts: dict = {}
        self._absorb = None
        self._another = jax.jit(lambda v, lg, seen, lim, p, k: SL.another_choice(v, lg, seen, lim, p, k, self.eos))
        self._shared: _SharedPrompt | None = None  # NOTE: one at a time: it holds a row's worth of K/V
        self.shared_prompts = 0  # NOTE: choices that took another choice's prefilled prompt
        self._prefix = jax.jit(PG.prefix_view, static_argnums=(4, 5))
        self._commit = jax.jit(PG.commit, donate_argnums=(0,))
        self._free = jax.jit(PG.free, donate_argnums=(0,))
        self._filling: dict[int, _Fill] = {}
        self._constraints: dict[int, TM.TokenConstraint] = {}  # NOTE: by sequence slot, while its request runs
        self._length = np.zeros(self.max_seqs, np.int64)  # NOTE: the host's view of each slot's filled cache
        self._seeds = itertools.count()
        self._base_key = jax.random.PRNGKey(seed)
        self.busy = np.zeros(self.max_seqs, bool)
        self.scores = ScoresOut(self.max_seqs)
        self.last_bucket: tuple[int, int] | None = None  # (rows, blocks) of the last decode chunk
        self.prompt_scorer = prompt_scorer  # NOTE: None: this model's prompts are not scored (a plain decoder)
        self.constrains = True  # NOTE: it follows a Request's TokenConstraint (a ContinuousEngine refuses one)
        self.on_compiled: Callable[[str], None] | None = None

    shares_products = False
    chunk_name = "decode chunk"  # NOTE: what warm_up's progress lines call a chunk's program

    @property
    def eos(self) -> tuple[int, ...]:
        return tuple(self.defaults.eos_token_id)

    @property
    def programs(self) -> int:
        """How many programs warm_up compiles."""
        g = self.geometry
        return (
            len(self.row_buckets) * len(self.block_buckets)
            + (1 if self.checks_rows else 0)
            + len(g.buckets)
            + (1 if g.chunked else 0)
            + (1 if self.prefix_cache else 0)
            + (1 if self.prompt_scorer is not None else 0)
            + 1  # NOTE: another choice of a prefilled prompt (another_choice)
        )

    def serving_shape(self) -> ServingShape:
        """What this engine's memory depends on, for the planner (planner/serving.py)."""
        g = self.geometry
        return ServingShape(
            g.layers,
            g.kv_heads,
            g.head_dim,
            np.dtype(g.cache_dtype).itemsize,
            g.vocab_size,
            g.max_length,
            self.block_size,
            self.row_buckets[-1],
            self.block_buckets[-1] * self.block_size,
        )

    @property
    def weight_bytes(self) -> int:
        """The weights' bytes as the programs hold them (half, int8 or float32)."""
        return held_bytes(self._weights)

    def check(self, request: Request) -> DecodeConfig:
        """The request's config, or a GenerationError naming the limit it breaks (also: more blocks than the
        whole pool holds)."""
        cfg = checked(self.geometry, self.defaults, request)
        need = self.blocks.blocks_for(self._tokens(request, cfg))
        if need > self.blocks.num_blocks - 1:
            raise GenerationError(
                f"a request of {self._tokens(request, cfg)} tokens needs {need} blocks of {self.block_size}; the KV "
                f"cache holds {self.blocks.num_blocks - 1} ({self.blocks.capacity_tokens} tokens): give the "
                "server more KV cache (--kv-cache-tokens) or ask for fewer max_tokens"
            )
        return cfg

    @staticmethod
    def _tokens(request: Request, cfg: DecodeConfig) -> int:
        return len(request.ids) + cfg.max_new_tokens

    def fits_now(self, request: Request) -> bool:
        """Whether a free sequence slot and the request's blocks are free now."""
        need = self.blocks.blocks_for(self._tokens(request, request.config(self.defaults)))
        return self.free_row() is not None and need <= self.blocks.free_blocks

    # ---- programs ----
    def _weights_on_device(self):
        if self._params is None:
            self._params = self._place(self._weights)
        return self._params

    def _paged(self) -> PG.Paged:
        if self._state is None:
            g = self.geometry
            with x64.scope():
                self._state = PG.empty(
                    2 * g.layers,
                    self.blocks.num_blocks,
                    g.kv_heads,
                    self.block_size,
                    g.head_dim,
                    g.cache_dtype,
                    self.max_seqs,
                    g.vocab_size,
                )
        return self._state

    def _start_fn(self, bucket: int):
        if bucket not in self._starts:
            prefill, eos, dtype = self._prefill1_for(bucket), self.eos, self.geometry.cache_dtype
            self._starts[bucket] = jax.jit(
                lambda w, ids, mask, limit, params, key: SL.start_keeping(
                    prefill, w, ids, mask, np.ones(1, bool), limit[None], params, key[None], bucket, dtype, eos
                )
            )
        return self._starts[bucket]

    def _absorb_fn(self):
        if self._absorb is None:
            extend, eos = self._extend1, self.eos
            self._absorb = jax.jit(
                lambda w, s, ids, mask, fresh, last, limit, params, key: SL.absorb_row_keeping(
                    extend, w, s, 0, ids, mask, fresh, last, limit, params, key, eos
                )
            )
        return self._absorb

    def _run_fn(self, rows: int, blocks: int):
        if (rows, blocks) not in self._runs:
            decode, eos, pad, chunk = self._decode, self.eos, self.defaults.pad_token_id, self.geometry.chunk
            self._runs[(rows, blocks)] = jax.jit(
                lambda w, s, r, t, steps, allowed: PG.run(decode, w, s, r, t, steps, allowed, chunk, eos, pad),
                donate_argnums=(1,),
            )
        return self._runs[(rows, blocks)]

    # ---- what a scheduler calls ----
    def free_row(self) -> int | None:
        rows = np.flatnonzero(~self.busy)
        return int(rows[0]) if rows.size else None

    def begin(self, row: int, request: Request) -> int:
        """Reserve sequence slot `row` and the request's blocks (checked: a GenerationError names what is
        wrong; call fits_now first, a request that does not fit now is a GenerationError here) and return how
        many `fill` calls its prompt takes."""
        cfg = self.check(request)
        tokens = self._tokens(request, cfg)
        # NOTE: a prompt within a bucket is prefilled whole, by another program than chunk_layout's chunks
        chunked = self.geometry.bucket(len(request.ids)) is None
        # NOTE: before the blocks are taken: a constraint's first mask is the request's own code, and may fail
        params = request_params(cfg, request, self.geometry.vocab_size)
        admitted = self.blocks.admit(row, request.ids, tokens, cacheable=chunked)
        if admitted is None:
            raise GenerationError(f"the KV cache has no room for {tokens} tokens now: wait for fits_now")
        hit = admitted.hit_tokens
        steps, whole = prefill_steps(self.geometry, request, cfg, start=hit)
        key = request_key(request, self._base_key, self._seeds)
        f = _Fill(steps, np.int32(cfg.max_new_tokens), params, key, whole, tokens=len(request.ids), hit=hit)
        f.prompt, f.choices, f.total_steps = tuple(request.ids), request.choices, len(steps)
        self.scores.wanted[row] = request.logprobs
        if hit:
            f.view, f.first = self._hit_view(row, request.ids[:hit]), False
        self._filling[row] = f
        if request.constraint is not None:
            self._constraints[row] = request.constraint
        self.busy[row] = True
        return len(steps)

    def hit_tokens(self, row: int) -> int:
        """Prompt tokens of the request begun in `row` that came from the prefix cache (0 once it is prefilled)."""
        f = self._filling.get(row)
        return f.hit if f is not None else 0

    def _hit_view(self, row: int, prefix) -> SL.Slots:
        """The batch-1 view of a request whose first len(prefix) tokens are cached blocks (paged.prefix_view)."""
        g = self.geometry
        ids = np.full((1, g.max_length), prefix[0], np.int64)
        ids[0, : len(prefix)] = prefix
        with x64.scope():
            table = self._table(row, self.table_width)
            return self._prefix(self._paged().pool, table, np.int32(len(prefix)), ids, g.max_length, g.vocab_size)

    def fill(self, row: int) -> tuple[int, bool] | None:
        """The next prefill step of the prompt begun in `row`: None while more remain, then (its first token,
        whether it goes on)."""
        f = self._filling[row]
        if self._sibling_filling(f):
            return None  # NOTE: another choice is prefilling this prompt: this one takes it once it is in
        with x64.scope():
            if not self._took_shared(f):
                self._prefill_step(f)
            if f.steps:
                return None
            view = f.view
            assert view is not None  # NOTE: the last prefill step (or another choice's prompt) made it
            table = self._table(row, self.table_width)
            self._state = self._commit(self._paged(), np.int32(row), table, view, np.int32(f.hit))
            token, goes_on = int(view.token[0]), bool(view.live[0])
            self.scores.keep_first(row, view.first, 0)
            if goes_on:
                self._decoding(row, f.prompt, token)
        del self._filling[row]
        if f.choices > 1 and f.kept:
            self._shared = _SharedPrompt(f.prompt, f.choices - 1, view, *f.kept)
        self.blocks.commit_prompt(row)
        self._length[row] = f.tokens
        if row in self._constraints:
            self._constraints[row].accept(token)
        if not goes_on:
            self._end(row)
        return token, goes_on

    def _decoding(self, row: int, prompt: tuple[int, ...], token: int) -> None:
        """Sequence slot `row`'s prompt is in its blocks and its first token made: it decodes from now on."""

    def _prefill_step(self, f: _Fill) -> None:
        ids, mask = f.steps.pop(0)
        w = self._weights_on_device()
        if f.whole:
            f.view, *kept = self._start_fn(ids.shape[1])(w, ids, mask, f.limit, f.params, f.key)
        else:
            if f.view is None:
                g = self.geometry
                shape = (2 * g.layers, 1, g.kv_heads, g.max_length, g.head_dim)
                f.view = SL.empty(shape, g.cache_dtype, g.vocab_size)
            f.view, *kept = self._absorb_fn()(
                w, f.view, ids, mask, np.bool_(f.first), np.bool_(not f.steps), f.limit, f.params, f.key
            )
        f.first = False
        f.kept = tuple(kept) if not f.steps else ()

    def _sibling_filling(self, f: _Fill) -> bool:
        """Whether another choice of `f`'s request (the same prompt) is part-way into its prefill while `f` has
        run no step: a long prompt's chunks go in a round at a time beside running streams."""
        if f.choices < 2 or len(f.steps) != f.total_steps:
            return False
        return any(
            o is not f and o.prompt == f.prompt and o.choices > 1 and len(o.steps) < o.total_steps
            for o in self._filling.values()
        )

    def _took_shared(self, f: _Fill) -> bool:
        """Whether `f`'s prompt was just prefilled for another choice of its request: then its view is that one,
        with its own first token (SL.another_choice), and no prefill step runs."""
        shared = self._shared
        if shared is None or shared.prompt != f.prompt or len(f.steps) != f.total_steps:
            return False
        f.view = self._another(shared.view, shared.logits, shared.seen, f.limit, f.params, f.key)
        f.steps.clear()
        f.kept = ()
        shared.left -= 1
        if shared.left == 0:
            self._shared = None
        self.shared_prompts += 1
        return True

    def score_prompt(self, ids) -> R.TokenScores:
        """The prompt's own log-probabilities (prompt_scores.py), beside the running requests (their cache and
        rows untouched)."""
        if self.prompt_scorer is None:
            raise GenerationError(
                "this model's prompts are not scored (a plain decoder's prefill has no logits per position)"
            )
        return self.prompt_scorer(self._weights_on_device(), ids)

    def step_and_fill(self, row: int) -> tuple[tuple[int, bool] | None, np.ndarray]:
        """fill(row), then run_chunk() (a paged engine runs them as two programs)."""
        done = self.fill(row)
        return done, self.run_chunk()

    def run_chunk(self) -> np.ndarray:
        """One decode chunk of the running sequences in its bucket: tokens [max_seqs, chunk] (NO_TOKEN where a
        slot made none). Sequences that ended give their blocks back."""
        out = np.full((self.max_seqs, self.chunk_tokens), SL.NO_TOKEN, np.int32)
        running = [int(r) for r in np.flatnonzero(self.busy) if r not in self._filling]
        if not running:
            return out
        rows, blocks = self.bucket_of(running)
        self.last_bucket = (rows, blocks)
        index = np.full(rows, self.max_seqs, np.int32)
        index[: len(running)] = running
        tables = np.zeros((rows, blocks), np.int32)
        for i, r in enumerate(running):
            tables[i] = self._table(r, blocks)
        wanted = bool(self.scores.wanted[running].any())
        allowed = TM.unconstrained(rows, self.geometry.vocab_size)
        constrained = {i: self._constraints[r] for i, r in enumerate(running) if r in self._constraints}
        for i, constraint in constrained.items():
            allowed[i] = constraint.allowed()
        # NOTE: a constrained row's next mask needs the token it makes now: one step, then back to the host
        steps = 1 if constrained else self.geometry.chunk
        with x64.scope():
            made, scores = self._decode_chunk(index, tables, np.int32(steps), allowed, sorted(constrained))
            made, live = np.asarray(made), np.asarray(self._paged().seqs.live)
        self.scores.keep_chunk(_by_slot(scores, running, self.max_seqs) if wanted else None)
        for i, constraint in constrained.items():
            if made[i, 0] != SL.NO_TOKEN:
                constraint.accept(int(made[i, 0]))
        out[running] = made[: len(running)]
        self._length[running] += (made[: len(running)] != SL.NO_TOKEN).sum(axis=1)
        for r in running:
            if not live[r]:
                self._end(r)
        return out

    def _decode_chunk(self, index, tables, steps, allowed, constrained: list[int]):
        """Up to `steps` decode steps of the bucket's rows (index [R] sequence slots, tables [R, N]; constrained:
        the bucket rows under a grammar): (tokens [R, chunk_tokens], their TokenScores)."""
        rows, blocks = tables.shape
        self._state, made, scores = self._run_fn(rows, blocks)(
            self._weights_on_device(), self._paged(), index, tables, steps, allowed
        )
        return made, scores

    @property
    def chunk_tokens(self) -> int:
        """The most tokens a decode chunk makes a sequence."""
        return self.geometry.chunk

    def bucket_of(self, running) -> tuple[int, int]:
        """(rows, blocks) of the smallest bucket that holds the running sequences' next chunk."""
        rows = next(b for b in self.row_buckets if b >= len(running))
        longest = int(self._length[running].max()) + self.chunk_tokens
        need = min(-(-longest // self.block_size), self.table_width)
        return rows, next(b for b in self.block_buckets if b >= need)

    def _table(self, row: int, width: int) -> np.ndarray:
        table = self.blocks.table(row)[:width]
        return np.pad(np.asarray(table, np.int32), (0, width - len(table)))

    def _end(self, row: int) -> None:
        self._constraints.pop(row, None)
        self.busy[row] = False
        self.blocks.release(row)

    def free(self, row: int) -> None:
        """End `row`'s request now (cancelled, timed out), also one whose prompt is still going in."""
        if self._filling.pop(row, None) is not None:
            self._end(row)
        elif self.busy[row]:
            with x64.scope():
                self._state = self._free(self._paged(), np.int32(row))
            self._end(row)

    def warm_up(self) -> None:
        """Compile every prefill bucket, the chunked prefill, and the decode chunk of every (rows, blocks)
        bucket; each told to on_compiled as it ends. No request compiles afterwards."""
        g, began = self.geometry, time.perf_counter()
        checked = None
        if self.checks_rows and not self._rows_checked:
            wanted = self.row_buckets
            self._keep_row_buckets(self._invariant_row_buckets())
            checked = _checked_line(wanted, self.row_buckets, g.max_batch_size)
        # NOTE: counted after the check: a bucket it drops has no programs to compile
        compiled = compile_progress_lines(self.on_compiled, self.programs, began)
        if checked is not None:
            compiled(checked)
        for i, bucket in enumerate(g.buckets):
            # NOTE: the first goes on, and is cancelled: its free compiles too
            first = i == 0 and bucket < g.max_length
            self.begin(0, Request((1,) * bucket, max_new_tokens=2 if first else 1))
            self.fill(0)
            self.free(0)
            compiled(f"prefill bucket {bucket}" + (" and a cancelled request's free" if first else ""))
        for _ in range(2):
            # NOTE: a request's second choice takes the first one's prefilled prompt (another_choice)
            self.begin(0, Request((1,) * g.buckets[0], max_new_tokens=1, choices=2))
            self.fill(0)
        compiled("another choice of a prefilled prompt (n)")
        long = Request((1,) * ((g.prefill_chunk or 0) + 1), max_new_tokens=1)
        if g.chunked:
            # NOTE: two choices: another choice of a chunked prompt takes a view of the whole cache's length
            for _ in range(2):
                self._prefill_alone(Request(long.ids, max_new_tokens=1, choices=2))
            compiled(f"chunked prefill ({g.prefill_chunk} tokens a chunk), and another choice of its prompt")
        if self.prompt_scorer is not None:
            try:
                self.score_prompt((1, 1))
                compiled("a prompt's log-probabilities (echo)")
            except GenerationError as e:  # NOTE: the model still serves; echo with logprobs gets a 400
                self.prompt_scorer = None
                compiled(f"no prompt log-probabilities: {e}")
        if self.prefix_cache:
            # NOTE: the same prompt again hits the chunk just cached; warm-up's prompts count in no statistics
            self._prefill_alone(long)
            self.blocks.stats = PrefixCacheStats()
            compiled("a prefix-cache hit's view of its cached blocks")
        with x64.scope():
            for rows in self.row_buckets:
                for blocks in self.block_buckets:
                    # NOTE: no row live: the program compiles and runs no step
                    index = np.full(rows, self.max_seqs, np.int32)
                    tables = np.zeros((rows, blocks), np.int32)
                    self._decode_chunk(index, tables, np.int32(g.chunk), TM.unconstrained(rows, g.vocab_size), [])
                    compiled(f"{self.chunk_name} of {rows} rows over {blocks} blocks of {self.block_size}")

    def _invariant_row_buckets(self) -> tuple[int, ...]:
        """The row buckets whose decode step gives each row the numbers of generate's step of max_batch_size
        rows to the bit (logits, K/V, token and score of rows sampling with top-k, top-p and a penalty, on
        random cache blocks), and max_batch_size itself."""
        full, most = self.geometry.max_batch_size, self.row_buckets[-1]
        tables = np.arange(1, most + 1, dtype=np.int32)[:, None]
        decode, eos = self._decode, self.eos
        probe = jax.jit(lambda w, state, rows, tables: PG.row_numbers(decode, w, state, rows, tables, eos))
        with x64.scope():
            state, w = self._probe_state(most), self._weights_on_device()
            numbers = {
                r: [np.asarray(a) for a in probe(w, state, np.arange(r, dtype=np.int32), tables[:r])]
                for r in sorted(set(self.row_buckets) | {full})
            }
        logits, new, token, term = numbers[full]

        def same(r):
            got, n = numbers[r], min(r, full)
            return (
                np.array_equal(got[0][:n], logits[:n])
                and np.array_equal(got[1][:, :n], new[:, :n])
                and np.array_equal(got[2][:n], token[:n])
                and np.array_equal(got[3][:n], term[:n])
            )

        return tuple(sorted({r for r in self.row_buckets if same(r)} | {full}))

    def _keep_row_buckets(self, kept: tuple[int, ...]) -> None:
        """Run decode chunks in `kept` only; fewer sequences at once where the largest buckets went."""
        if self._state is not None:
            raise GenerationError("the row buckets are checked before any request runs (warm_up first)")
        self.row_buckets, self._rows_checked = kept, True
        if kept[-1] < self.max_seqs:
            self.max_seqs = kept[-1]
            self._length = np.zeros(self.max_seqs, np.int64)
            self.busy = np.zeros(self.max_seqs, bool)
            self.scores = ScoresOut(self.max_seqs)

    def _probe_state(self, rows: int) -> PG.Paged:
        """A paged state of `rows` sequences, one random block each (block r + 1), every one sampling."""
        g, bs, n = self.geometry, self.block_size, rows + 1
        rng = np.random.default_rng(0)
        empty = PG.empty(2 * g.layers, rows + 1, g.kv_heads, bs, g.head_dim, g.cache_dtype, rows, g.vocab_size)
        pool = tuple(jnp.asarray(0.5 * rng.standard_normal(layer.shape), layer.dtype) for layer in empty.pool)
        params = empty.seqs.params._replace(
            sampling=jnp.ones(n, bool),
            temperature=jnp.full(n, 0.7, jnp.float32),
            top_k=jnp.full(n, max(1, g.vocab_size // 4), jnp.int32),
            top_p=jnp.full(n, 0.9, jnp.float32),
            penalty=jnp.full(n, 1.1, jnp.float32),
        )
        seqs = empty.seqs._replace(
            length=jnp.full(n, bs - 1, jnp.int32),
            token=jnp.asarray(rng.integers(0, g.vocab_size, n)),
            position=jnp.full(n, bs - 1, jnp.int64),
            live=jnp.ones(n, bool),
            seen=jnp.asarray(rng.random((n, g.vocab_size)) < 0.01),
            keys=jnp.asarray(rng.integers(0, 2**32, (n, 2), dtype=np.uint32)),
            params=params,
        )
        return PG.Paged(pool, seqs)

    def _prefill_alone(self, request: Request) -> None:
        """Begin `request` in sequence slot 0 and run all its prefill steps (warm-up: it makes one token)."""
        self.begin(0, request)
        while 0 in self._filling:
            self.fill(0)


def block_buckets(width: int) -> tuple[int, ...]:
    """The blocks a decode chunk reads per row: 1, 2, 4, ... and `width` (a whole table), less the last power of
    two where `width` is within a quarter of it. A table holds max_length + 1 tokens, so a max_length of 4096
    made 256 and 257 blocks two programs of all but the same cost; now 257 runs for both."""
    out = powers_of_two(1, width)
    if len(out) > 2 and out[-1] <= 1.25 * out[-2]:
        return out[:-2] + out[-1:]
    return out


def _checked_line(wanted: tuple[int, ...], kept: tuple[int, ...], full: int) -> str:
    """warm_up's line for the row-bucket check (full: generate's rows, max_batch_size)."""
    dropped = sorted(set(wanted) - set(kept))
    if not dropped:
        others = [r for r in kept if r != full]
        return f"decode steps of {', '.join(map(str, others))} rows give a row the numbers of {full} rows (checked)"
    return (
        f"decode steps of {', '.join(map(str, dropped))} rows round a row otherwise than {full} rows here: they run "
        f"{' or '.join(map(str, kept))} rows"
    )


def paged_engine(
    geometry,
    defaults: DecodeConfig,
    weights: Mapping,
    program_of: Callable[[str], Callable],
    kv_cache_tokens: int | None = None,
    block_size: int = 16,
    max_seqs: int | None = None,
    seed: int = 0,
    place: Callable | None = None,
    batch_invariant: bool = True,
    prefix_cache: bool = True,
    kv_cache_memory: float | None = None,
    device=None,
    engine_type: Callable[..., PagedEngine] | None = None,
) -> PagedEngine:
    """The PagedEngine a server runs, on a generator's programs, whichever made them (a live px.Generator or a
    generator artifact): program_of(name) -> run for "decode_any" (the decode step with symbolic rows and
    slots; a plain decoder's: of one row, run per row, derive.per_row), f"prefill1_{bucket}" and, where
    prompts are chunked, "extend1" (made when first run), and all_logits.ALL_LOGITS + one of those (a prompt's
    scores, prompt_scores.py).

    kv_cache_tokens: the pool's slots (default: max_batch_size x max_length, the memory of a
    ContinuousEngine's rows); kv_cache_memory: instead, this fraction of `device`'s memory (default: the
    first device) left once the weights are on it (kv_tokens_in_memory); max_seqs:
    sequences at once (default: as many as the pool holds at 64 tokens each, at least max_batch_size and at
    most 4 x max_batch_size: each doubling of it is one more row bucket of programs to compile);
    engine_type: what makes the engine from PagedEngine's arguments (a speculating one: speculative/served.py)."""
    # NOTE: warm-up prefills one prompt of each bucket (and of prefill_chunk + 1 tokens where chunked) with a
    # new token or two: the cache must hold the largest
    largest = geometry.prefill_chunk + 2 if geometry.chunked else geometry.buckets[-1] + 1
    need = -(-largest // block_size) * block_size
    if kv_cache_memory is not None:
        tokens = kv_tokens_in_memory(kv_cache_memory, geometry, weights, block_size, device)
    else:
        # NOTE: the default holds the largest prompt even at max_batch_size 1 (an unchunked one: max_length + 1)
        tokens = kv_cache_tokens or max(geometry.max_batch_size * geometry.max_length, need)
    if tokens < need:
        raise GenerationError(
            f"a KV cache of {tokens} tokens cannot hold a prompt of the largest prefill bucket and its first "
            f"tokens ({largest} tokens, {need} in blocks of {block_size}): give at least {need} (--kv-cache-tokens)"
        )
    decode = program_of("decode_any")
    return (engine_type or PagedEngine)(
        geometry,
        defaults,
        derive.per_row(decode) if geometry.one_length else decode,
        lambda b: program_of(f"prefill1_{b}"),
        weights,
        num_blocks=tokens // block_size + 1,  # NOTE: + the null block
        block_size=block_size,
        max_seqs=max_seqs or max(geometry.max_batch_size, min(tokens // 64, 4 * geometry.max_batch_size)),
        seed=seed,
        place=place,
        extend1=made_on_first_call(lambda: program_of("extend1")) if geometry.chunked else None,
        batch_invariant=batch_invariant,
        prefix_cache=prefix_cache,
        # NOTE: a plain decoder's derived prefill is captured per row from its forward: no scores per position
        prompt_scorer=None if geometry.one_length else PromptScorer(geometry, program_of),
    )


def kv_tokens_in_memory(fraction: float, geometry, weights: Mapping, block_size: int = 16, device=None) -> int:
    """The KV-cache tokens (whole blocks) that `fraction` of the device's memory holds once the weights are
    on it: fraction x (its memory limit - what it holds now - the weights' bytes, where they are not on it
    yet) / (2 x layers x KV heads x head dim x the cache dtype's bytes per token). A GenerationError where the
    device does not report its memory (XLA:CPU does not) or the fraction leaves no block."""
    if not 0 < fraction < 1:
        raise GenerationError(f"kv_cache_memory={fraction} is no fraction of the device's memory: give 0 < F < 1")
    device = device or jax.devices()[0]
    stats = device.memory_stats() or {}
    if "bytes_limit" not in stats:
        raise GenerationError(
            f"{device.platform} device {device.id} does not report its memory, so no fraction of it can size the "
            "KV cache: give its size in tokens instead (--kv-cache-tokens)"
        )
    leaves = jax.tree.leaves(dict(weights))
    placed = any(getattr(w, "devices", lambda: ())() == {device} for w in leaves)
    weight_bytes = 0 if placed else held_bytes(weights)
    free = stats["bytes_limit"] - stats.get("bytes_in_use", 0) - weight_bytes
    g = geometry
    per_token = kv_token_bytes(g.layers, g.kv_heads, g.head_dim, np.dtype(g.cache_dtype).itemsize)
    tokens = pool_tokens(fraction, free, per_token, block_size)
    if tokens < block_size:
        raise GenerationError(
            f"{fraction} of the {free / 2**30:.2f} GiB {device.platform} device {device.id} has free after the "
            f"weights holds no block of {block_size} tokens ({per_token} bytes a token): give a larger fraction"
        )
    return tokens


def held_bytes(weights: Mapping) -> int:
    """The weights' bytes as held: every array of each (an int8 weight is its values and its scales)."""
    return sum(int(leaf.nbytes) for leaf in jax.tree.leaves(dict(weights)))


def _by_slot(scores, running: list[int], slots: int):
    """A bucket's TokenScores [R, chunk] on the host as [slots, chunk], the running sequences' rows in place."""
    out = []
    for a in scores:
        a = np.asarray(a)
        full = np.zeros((slots,) + a.shape[1:], a.dtype)
        full[running] = a[: len(running)]
        out.append(full)
    return type(scores)(*out)
