"""ContinuousEngine: the host side of slots.py. Insert a request into a free row, run decode chunks, free
rows; a server's scheduler (serve/llm/scheduler.py) drives it from one thread. Paddle-free.

Programs: the generator's decode step, a batch-1 prefill per prompt bucket (a request is prefilled
alone, so a long prompt never waits for company and never pads anyone else's), and, for prompts longer
than the geometry's prefill_chunk, the batch-1 extend program that prefills a prompt a chunk at a time.
A scheduler interleaves those chunks with decode chunks (`begin`, then `fill` once per decode chunk), so
a long prompt holds running streams up for one prefill chunk at a time. Given `together` (the programs'
Graphs lowered in lockstep, batch_engine.program_together), `step_and_fill` runs a decode step and a prefill
step as one program whose linear layers multiply the step's rows and the prompt's tokens together: the
gap a prefill puts between two tokens of a running stream is then one such step, not a step plus a
prefill. Every program compiles once: insert per bucket, one chunk program, the decode chunk (the row's
decode arguments are traced values), and with `together` a step beside each bucket and beside a chunk."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import jax
import numpy as np

from .. import x64
from ..errors import GenerationError
from ..runtime.compile_cache import ensure_compile_cache
from . import row_logits as R
from . import slots as SL
from . import token_masks as TM
from .batch_engine import chunk_layout, padded, program_together, rows_of
from .config import DecodeConfig

CHUNK = "chunk"  # together(CHUNK): the decode step beside the batch-1 extend (a bucket: beside its prefill)


@dataclass(frozen=True)
class Request:
    """One request's prompt and decode arguments (PaddleFormers' names and meanings)."""

    ids: tuple[int, ...]
    max_new_tokens: int
    decode_strategy: str = "greedy_search"
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    seed: int | None = None
    logprobs: bool = False  # its tokens' TokenScores go to the host (engine.scores: ScoresOut)
    ignore_eos: bool = False  # vLLM's: an EOS does not end it (it is a token like any other)
    # NOTE: how many choices (n) its request makes, each a Request; a paged engine prefills their prompt once
    choices: int = 1
    # NOTE: its grammar (structured output): each token is chosen among those it allows (a paged engine's)
    constraint: TM.TokenConstraint | None = field(default=None, compare=False)

    def config(self, defaults: DecodeConfig) -> DecodeConfig:
        """The checked DecodeConfig these arguments make (a GenerationError names what is wrong)."""
        return DecodeConfig(
            self.decode_strategy,
            self.max_new_tokens,
            self.min_new_tokens,
            self.top_k,
            self.top_p,
            self.temperature,
            self.repetition_penalty,
            defaults.eos_token_id,
            defaults.pad_token_id,
            min_new_with_eos_list=True,  # NOTE: a served request's min_tokens holds back every eos id (vLLM)
        )


@dataclass
class Filling:
    """A prompt on its way into a row: the prefill steps (ids, mask) still to run and its decode arguments."""

    steps: list
    limit: np.int32
    params: R.RowParams
    key: jax.Array
    whole: bool  # one prefill of a bucket; else extend chunks
    first: bool = True


class ContinuousEngine:
    def __init__(
        self,
        geometry,
        defaults: DecodeConfig,
        step: Callable,
        prefill1_for: Callable[[int], Callable],
        weights: Mapping,
        seed: int = 0,
        place: Callable | None = None,
        extend1: Callable | None = None,
        together: Callable | None = None,
    ):
        if geometry.chunked and extend1 is None:
            raise GenerationError(f"prefill_chunk={geometry.prefill_chunk} needs the batch-1 extend program")
        ensure_compile_cache()  # NOTE: before the first of this engine's programs compiles
        self.geometry, self.defaults = geometry, defaults
        self._step, self._prefill1_for, self._extend1 = step, prefill1_for, extend1
        # NOTE: together(CHUNK or a bucket) -> both(weights, step feeds, that program's feeds); None: apart
        self._together = together
        self._besides: dict = {}
        self._put = jax.jit(SL.with_row, donate_argnums=(0,))
        self._weights, self._place = dict(weights), place or jax.device_put
        self._params = None
        self._inserts: dict[int, Callable] = {}
        self._run = None
        self._absorb = None
        self.chunk_programs = None  # (the chunk, the row's write-back), made on first use (_absorb_fn)
        self._filling: dict[int, Filling] = {}
        self._free = jax.jit(SL.free, donate_argnums=(0,))
        self._slots = None
        self._seeds = itertools.count()
        self._base_key = jax.random.PRNGKey(seed)
        self.busy = np.zeros(geometry.max_batch_size, bool)  # the host's view: rows holding a request
        self.scores = ScoresOut(geometry.max_batch_size)
        # NOTE: warm_up's progress, one line per program compiled, e.g. "prefill bucket 16 (2/5, 1.3 s)"
        self.on_compiled: Callable[[str], None] | None = None

    @property
    def shares_products(self) -> bool:
        """Whether step_and_fill runs a decode step and a prefill step as one program (module docstring)."""
        return self._together is not None

    @property
    def eos(self) -> tuple[int, ...]:
        return tuple(self.defaults.eos_token_id)

    def check(self, request: Request) -> DecodeConfig:
        """The request's config, or a GenerationError naming the limit it breaks."""
        if request.constraint is not None:
            # NOTE: its rows run whole decode chunks, and a grammar's next mask needs the token just made
            raise GenerationError("constrained decoding (structured output) needs the paged engine's KV cache")
        return checked(self.geometry, self.defaults, request)

    # ---- programs ----
    def _weights_on_device(self):
        if self._params is None:
            self._params = self._place(self._weights)
        return self._params

    def _insert_fn(self, bucket: int):
        if bucket not in self._inserts:
            prefill, eos = self._prefill1_for(bucket), self.eos
            self._inserts[bucket] = jax.jit(
                lambda w, s, row, ids, mask, limit, params, key: SL.insert(
                    prefill, w, s, row, ids, mask, limit, params, key, eos
                ),
                donate_argnums=(1,),
            )
        return self._inserts[bucket]

    def _absorb_fn(self):
        if self._absorb is None:
            extend, eos = self._extend1, self.eos
            # NOTE: two programs: the chunk reads the cache, the put writes the row back (slots.absorb_row says why)
            self.chunk_programs = (
                jax.jit(
                    lambda w, s, row, ids, mask, fresh, last, limit, params, key: SL.absorb_row(
                        extend, w, s, row, ids, mask, fresh, last, limit, params, key, eos
                    )
                ),
                self._put,
            )

            def run(w, s, row, *args):
                absorb, put = self.chunk_programs
                view, token, goes_on = absorb(w, s, row, *args)
                return put(s, row, view), token, goes_on

            self._absorb = run
        return self._absorb

    def _beside_fn(self, bucket: int | None):
        """A decode step with a prefill step beside it: of a bucket's prompt, or (None) a chunk."""
        if bucket not in self._besides:
            both, eos, pad = self._together(CHUNK if bucket is None else bucket), self.eos, self.defaults.pad_token_id
            beside = SL.step_beside_chunk if bucket is None else SL.step_beside_prompt
            # NOTE: one step, not a chunk: a decode loop in the same program made XLA:CPU copy the whole cache
            # (the loop's carry is also read by the prefill's row), so step_and_fill runs the chunk after it
            self._besides[bucket] = jax.jit(
                lambda w, s, row, *fill: beside(both, w, s, row, *fill, eos, pad), donate_argnums=(1,)
            )
        return self._besides[bucket]

    def _run_fn(self):
        if self._run is None:
            eos, pad, chunk = self.eos, self.defaults.pad_token_id, self.geometry.chunk
            self._run = jax.jit(lambda w, s: SL.run(self._step, w, s, chunk, eos, pad), donate_argnums=(1,))
        return self._run

    def _state(self):
        if self._slots is None:
            g = self.geometry
            shape = (2 * g.layers, g.max_batch_size, g.kv_heads, g.max_length, g.head_dim)
            with x64.scope():
                self._slots = SL.empty(shape, g.cache_dtype, g.vocab_size)
        return self._slots

    # ---- what a scheduler calls ----
    def fits_now(self, request: Request) -> bool:
        """Whether a row is free for `request` now (a row holds any request check() accepts)."""
        return self.free_row() is not None

    def hit_tokens(self, row: int) -> int:
        """Prompt tokens of the request begun in `row` that a prefix cache held: none (this engine has none)."""
        return 0

    def free_row(self) -> int | None:
        rows = np.flatnonzero(~self.busy)
        return int(rows[0]) if rows.size else None

    def insert(self, row: int, request: Request) -> tuple[int, bool]:
        """Prefill `request` into `row` whole (every chunk at once): (its first token, whether it goes on)."""
        self.begin(row, request)
        while (done := self.fill(row)) is None:
            pass
        return done

    def begin(self, row: int, request: Request) -> int:
        """Reserve `row` for `request` (checked: a GenerationError names what is wrong) and return how many
        `fill` calls its prompt takes: one for a prompt within a bucket, else one per prefill_chunk tokens."""
        cfg = self.check(request)
        steps, whole = prefill_steps(self.geometry, request, cfg)
        key = request_key(request, self._base_key, self._seeds)
        params = request_params(cfg, request, self.geometry.vocab_size)
        self._filling[row] = Filling(steps, np.int32(cfg.max_new_tokens), params, key, whole=whole)
        self.busy[row] = True
        self.scores.wanted[row] = request.logprobs
        return len(steps)

    def fill(self, row: int) -> tuple[int, bool] | None:
        """Run the next prefill step of the prompt begun in `row`: None while more remain, then (its first
        token, whether it goes on)."""
        f = self._filling[row]
        ids, mask = f.steps.pop(0)
        with x64.scope():
            if f.whole:
                self._slots, token, goes_on = self._insert_fn(ids.shape[1])(
                    self._weights_on_device(), self._state(), np.int32(row), ids, mask, f.limit, f.params, f.key
                )
            else:
                self._slots, token, goes_on = self._absorb_fn()(
                    self._weights_on_device(),
                    self._state(),
                    np.int32(row),
                    ids,
                    mask,
                    np.bool_(f.first),
                    np.bool_(not f.steps),
                    f.limit,
                    f.params,
                    f.key,
                )
            f.first = False
            if f.steps:
                return None
            token, goes_on = int(token), bool(goes_on)
            self.scores.keep_first(row, self._slots.first, row)
        del self._filling[row]
        self.busy[row] = goes_on
        return token, goes_on

    def step_and_fill(self, row: int) -> tuple[tuple[int, bool] | None, np.ndarray]:
        """fill(row), then run_chunk(): (fill's result, the tokens [B, n] each row made). With `together`
        (module docstring) the prefill step runs beside a decode step, in one program, and a decode chunk of
        more than one step follows it (then n = 1 + chunk, the filled row in the chunk as after fill); the
        tokens are each request's own either way."""
        if self._together is None:
            done = self.fill(row)
            return done, self.run_chunk()
        f = self._filling[row]
        ids, mask = f.steps.pop(0)
        with x64.scope():
            w, s, at = self._weights_on_device(), self._state(), np.int32(row)
            wanted = self.scores.any_running(self.busy, self._filling)
            if f.whole:
                s, made, scores, view, token, goes_on = self._beside_fn(ids.shape[1])(
                    w, s, at, ids, mask, f.limit, f.params, f.key
                )
            else:
                s, made, scores, view, token, goes_on = self._beside_fn(None)(
                    w, s, at, ids, mask, np.bool_(f.first), np.bool_(not f.steps), f.limit, f.params, f.key
                )
            self._slots = self._put(s, at, view)
            f.first = False
            out, live = np.asarray(made)[:, None], np.asarray(self._slots.live)
            self.scores.keep_chunk(jax.tree.map(lambda a: a[:, None], scores) if wanted else None)
            done = None if f.steps else (int(token), bool(goes_on))
            if done is not None:
                self.scores.keep_first(row, view.first, 0)
        if done is not None:
            del self._filling[row]
        self.busy &= live
        self.busy[list(self._filling)] = True
        if self.geometry.chunk > 1 and self.busy.any():
            step_scores = self.scores.last
            out = np.concatenate([out, self.run_chunk()], axis=1)
            self.scores.keep_chunk(join_steps(step_scores, self.scores.last, out.shape))
        return done, out

    def run_chunk(self) -> np.ndarray:
        """One decode chunk: tokens [B, chunk] each row made (NO_TOKEN where none). Rows that ended are
        free afterwards."""
        with x64.scope():
            wanted = self.scores.any_running(self.busy, self._filling)
            self._slots, out, scores = self._run_fn()(self._weights_on_device(), self._state())
            out, live = np.asarray(out), np.asarray(self._slots.live)
            self.scores.keep_chunk(scores if wanted else None)
        self.busy &= live
        self.busy[list(self._filling)] = True  # NOTE: a row whose prompt is still going in
        return out

    def free(self, row: int) -> None:
        """End `row`'s request now (cancelled, timed out), also one whose prompt is still going in."""
        if self._filling.pop(row, None) is not None:
            self.busy[row] = False  # NOTE: its row is not live on the device until its last chunk
        elif self.busy[row]:
            with x64.scope():
                self._slots = self._free(self._state(), np.int32(row))
            self.busy[row] = False

    def warm_up(self) -> None:
        """Compile every bucket's insert, the decode chunk, the free of a cancelled row and (with `together`)
        the decode step beside each prefill program; each step told to on_compiled as it ends."""
        g = self.geometry
        long = (g.prefill_chunk + 1,) if g.chunked else ()
        total = 1 + len(g.buckets) + len(long) + (len(g.buckets + long) if self._together is not None else 0)
        compiled = compile_progress_lines(self.on_compiled, total)
        self.insert(0, Request((1,), max_new_tokens=3))
        self.free(0)
        compiled(f"a request's insert and free (batch of {g.max_batch_size} rows, context {g.max_length})")
        for i, bucket in enumerate(g.buckets):
            two = bucket < g.max_length
            self.insert(0, Request((1,) * bucket, max_new_tokens=2 if two else 1))
            self.run_chunk()
            self.free(0)
            compiled(f"prefill bucket {bucket}" + (f" and the decode chunk of {g.chunk} tokens" if i == 0 else ""))
        if g.chunked:
            self.insert(0, Request((1,) * (g.prefill_chunk + 1), max_new_tokens=1))
            compiled(f"chunked prefill ({g.prefill_chunk} tokens a chunk)")
        if self._together is not None:
            for n in g.buckets + long:
                self.begin(0, Request((1,) * n, max_new_tokens=1))
                while 0 in self._filling:
                    self.step_and_fill(0)
                self.free(0)
                compiled(f"decode beside prefill {'chunks' if long and n == long[0] else f'bucket {n}'}")


def compile_progress_lines(
    on_compiled: Callable[[str], None] | None, total: int, since: float | None = None
) -> Callable[[str], None]:
    """compiled(what): tells on_compiled "WHAT (i/total, t s)", t the time since the previous line (the first:
    since `since`, a perf_counter time, default now) (warm-up's progress, one line per program)."""
    done = itertools.count(1)
    start = [time.perf_counter() if since is None else since]

    def compiled(what: str) -> None:
        if on_compiled is not None:
            on_compiled(f"{what} ({next(done)}/{total}, {time.perf_counter() - start[0]:.1f} s)")
        start[0] = time.perf_counter()

    return compiled


def checked(geometry, defaults: DecodeConfig, request: Request) -> DecodeConfig:
    """The request's config, or a GenerationError naming the limit of the context it breaks."""
    g = geometry
    cfg = request.config(defaults)
    if not request.ids:
        raise GenerationError("the prompt is empty: give at least one token")
    bad = [i for i in request.ids if not 0 <= i < g.vocab_size]
    if bad:
        raise GenerationError(f"token id {bad[0]} is outside the vocabulary [0, {g.vocab_size})")
    if len(request.ids) > g.max_length:
        raise GenerationError(
            f"the prompt ({len(request.ids)} tokens) is longer than the context (max_length={g.max_length})"
        )
    room = g.max_length - len(request.ids) + 1  # NOTE: the bucket's padding takes no slot (slots.packed)
    if cfg.max_new_tokens > room:
        raise GenerationError(
            f"max_new_tokens={cfg.max_new_tokens} does not fit the context: a prompt of "
            f"{len(request.ids)} tokens leaves room for {room} in max_length={g.max_length}"
        )
    return cfg


def prefill_steps(geometry, request: Request, cfg: DecodeConfig, start: int = 0) -> tuple[list, bool]:
    """The (ids, mask) of each prefill step of the request's prompt from token `start` (a multiple of
    prefill_chunk: the tokens before are in the cache), and whether it goes in whole (one step of its
    bucket) rather than in extend chunks (batch_engine.chunk_layout)."""
    g, n = geometry, len(request.ids)
    if start == 0 and g.bucket(n) is not None:
        ids, mask = padded(
            np.asarray([request.ids], np.int64), np.ones((1, n), np.int64), g.bucket(n), 1, cfg.pad_token_id
        )
        return [(ids, mask)], True
    rest = np.asarray([(request.ids[0],) + request.ids[start:]], np.int64)  # NOTE: [0]: the padding's id
    mask = np.ones(rest.shape, np.int64)
    mask[0, 0] = 0
    ids, mask = chunk_layout(rest, mask, g.prefill_chunk, 1, cfg.pad_token_id)
    c = g.prefill_chunk
    return [(ids[:, i : i + c], mask[:, i : i + c]) for i in range(0, ids.shape[1], c)], False


def request_key(request: Request, base_key, seeds) -> jax.Array:
    """The request's random key: from its seed, else the engine's key folded with its next count."""
    if request.seed is not None:
        return jax.random.PRNGKey(request.seed)
    return jax.random.fold_in(base_key, next(seeds))


def continuous_engine(
    geometry,
    defaults: DecodeConfig,
    weights: Mapping,
    program_of: Callable[[str], Callable],
    shared_products: tuple | None = None,
    seed: int = 0,
    place: Callable | None = None,
) -> ContinuousEngine:
    """The ContinuousEngine a server runs, on a generator's programs, whichever made them: a live
    px.Generator (api/generator.py) or a generator artifact (artifact/generator_reader.py).

    program_of(name) -> run, the names an artifact gives them: "decode", f"prefill1_{bucket}" (made when
    that bucket first comes) and, where prompts are chunked, "extend1" (made when it first runs: a live
    generator captures it then, and a server may never see a prompt that long). shared_products:
    (graph_of(name) -> Graph, policy, held) to run a decode step beside a prefill as one program that
    shares their linear layers' products (batch_engine.program_together); None runs them apart."""
    if geometry.one_length:
        raise GenerationError(
            "a plain decoder's derived cache shares its positions across a decode step's rows, so only the "
            "paged engine, which runs its step one row at a time, serves it: serve it with the paged KV cache "
            "(drop --no-paged-kv-cache; px.Generator.paged())"
        )
    extend1 = made_on_first_call(lambda: program_of("extend1")) if geometry.chunked else None
    together = None
    if shared_products is not None:
        graph_of, policy, held = shared_products

        def together(what):
            other = "extend1" if what == CHUNK else f"prefill1_{what}"
            return program_together([graph_of("decode"), graph_of(other)], policy, held)

    return ContinuousEngine(
        geometry,
        defaults,
        program_of("decode"),
        lambda b: program_of(f"prefill1_{b}"),
        weights,
        seed=seed,
        place=place,
        extend1=extend1,
        together=together,
    )


def request_params(cfg: DecodeConfig, request: Request, vocab: int) -> R.RowParams:
    """One request's decode arguments as the [1] arrays a prefill takes, its logprobs, ignore_eos and the mask
    of its first token (its constraint's, when it has one) among them."""
    constraint = request.constraint
    first = TM.unconstrained(1, vocab) if constraint is None else np.asarray(constraint.allowed(), np.int32)[None]
    return rows_of(cfg, 1, vocab)._replace(
        logprobs=np.full(1, request.logprobs, bool), ignore_eos=np.full(1, request.ignore_eos, bool), allowed=first
    )


class ScoresOut:
    """The TokenScores an engine hands its scheduler, copied from the device only where a request wants them:
    `first[row]` (its first token's, left by fill until taken) and `last` (the last decode chunk's, rows as
    run_chunk's tokens; None when no running request wanted them)."""

    def __init__(self, rows: int):
        self.wanted = np.zeros(rows, bool)  # NOTE: by sequence slot, set at begin
        self.first: dict[int, R.TokenScores] = {}
        self.last: R.TokenScores | None = None

    def any_running(self, busy, filling) -> bool:
        running = busy.copy()
        running[list(filling)] = False
        return bool(self.wanted[running].any())

    def keep_first(self, row: int, scores: R.TokenScores, index: int) -> None:
        if self.wanted[row]:
            self.first[row] = scores.at(index)

    def keep_chunk(self, scores: R.TokenScores | None) -> None:
        self.last = None if scores is None else R.TokenScores(*(np.asarray(a) for a in scores))


def join_steps(head: R.TokenScores | None, tail: R.TokenScores | None, shape) -> R.TokenScores | None:
    """Two runs of steps' TokenScores side by side ([B, n] + [B, m]), zeros for a run that kept none."""
    if head is None and tail is None:
        return None
    some = head if head is not None else tail
    assert some is not None  # NOTE: for mypy; one of them is
    rows, k = some.top_ids.shape[0], some.top_ids.shape[-1]

    def filled(part, steps):
        if part is not None:
            return part
        return R.TokenScores(
            np.zeros((rows, steps), np.float32),
            np.zeros((rows, steps, k), np.int32),
            np.zeros((rows, steps, k), np.float32),
        )

    head = filled(head, 1)
    tail = filled(tail, shape[1] - 1)
    return R.TokenScores(*(np.concatenate([a, b], axis=1) for a, b in zip(head, tail)))


def made_on_first_call(make: Callable[[], Callable]) -> Callable:
    """A program that `make()` makes (captures, lowers) when it first runs."""
    made: list = []

    def run(*args):
        if not made:
            made.append(make())
        return made[0](*args)

    return run
