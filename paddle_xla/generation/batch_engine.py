"""BatchEngine: generate with a causal LM's two programs (prefill per prompt bucket, one decode step), Paddle-free.

The programs come from wherever the model lives: px.Generator captures them from a live Paddle model,
a generator artifact (artifact/generator_reader.py) deserializes or re-lowers them. Both then generate
through this one class, so a loaded artifact keeps the live model's arguments, checks and numbers.

`Geometry` is everything fixed when the programs are made (it is what an artifact records):
batch slots, cache slots, the cache's shape, the vocabulary and the precision.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import x64
from ..errors import GenerationError
from ..graph import Graph
from ..lowering.int8 import QUANT_TYPES
from ..lowering.layouts import nk_weight_names
from ..lowering.lower import lower
from ..lowering.policy import LoweringPolicy
from ..lowering.shared_products import lower_together
from ..runtime.compile_cache import compile_progress, ensure_compile_cache
from ..runtime.held import HeldWeights
from . import gqa_rewrite, last_logits, row_means
from . import row_logits as R
from . import slots as SL
from . import token_masks as TM
from .config import DecodeConfig, decode_config

FIRST_BUCKET = 16


@dataclass(frozen=True)
class Geometry:
    max_batch_size: int
    max_length: int  # cache slots: prompt bucket + new tokens fit in it
    layers: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    chunk: int = 16  # decode steps per host call
    precision: str = "fp32"  # "fp32" | "bf16" | "fp16": compute, and the KV cache's dtype
    one_length: bool = False  # a derived cache (generation/derive.py): a call's rows share positions
    quant_type: str | None = None  # "weight_only_int8": matmul weights held as int8 + per-channel scales
    # NOTE: prompts longer than this are prefilled in chunks of this many tokens (the extend programs), so
    # that a server's running streams wait for one chunk at most; None: one prefill per bucket up to
    # max_length (a plain decoder's derived cache, and artifacts written before chunks existed)
    prefill_chunk: int | None = None

    def __post_init__(self):
        for name in ("max_batch_size", "max_length", "chunk", "prefill_chunk"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise GenerationError(f"{name}={getattr(self, name)} must be at least 1")
        if self.quant_type not in (None,) + QUANT_TYPES:
            raise GenerationError(
                f"quant_type={self.quant_type!r} is none of {QUANT_TYPES}: this artifact was "
                "written by a later paddle_xla"
            )

    @property
    def chunked(self) -> bool:
        """Whether prompts longer than prefill_chunk are prefilled in chunks (extend programs)."""
        return self.prefill_chunk is not None and self.prefill_chunk < self.max_length

    @property
    def buckets(self) -> tuple[int, ...]:
        """The prompt lengths a whole prefill is made for: 16, 32, ... up to the last, which is prefill_chunk
        when prompts are chunked and max_length otherwise."""
        return powers_of_two(FIRST_BUCKET, self.prefill_chunk if self.chunked else self.max_length)

    def bucket(self, n: int) -> int | None:
        """The bucket a prompt of n tokens is prefilled whole in; None: it is prefilled in chunks."""
        return next((b for b in self.buckets if b >= n), None)

    def chunks(self, n: int) -> int:
        """How many prefill steps a prompt of n tokens takes: 1 in a bucket, else ceil(n / prefill_chunk)."""
        return 1 if self.bucket(n) is not None else -(-n // self.prefill_chunk)

    def prefill_width(self, n: int) -> int:
        """The width a prompt of n tokens is left-padded to: its bucket, or a whole number of prefill chunks."""
        return self.bucket(n) or self.chunks(n) * self.prefill_chunk

    @property
    def cache_dtype(self):
        return {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}[self.precision]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> Geometry:
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})


def powers_of_two(first: int, last: int) -> tuple[int, ...]:
    """first, 2 * first, ... below `last`, then `last` itself (prompt buckets; a paged engine's row and block
    buckets)."""
    out, b = [], first
    while b < last:
        out.append(b)
        b *= 2
    return tuple(out) + (last,)


def program(graph: Graph, policy: LoweringPolicy, held: HeldWeights | None = None):
    """The Graph as run(weights, *feeds) -> fetches, weights a dict holding (at least) its persistables, laid
    out as `held` says (None: as Paddle holds them). Its grouped-query attention reads the keys and values
    unrepeated (gqa_rewrite.py), its LM head multiplies only the position it returns (last_logits.py), and its
    means over the last axis sum in a fixed order (row_means.py)."""
    fn = lower(_rewritten(graph), policy)
    inputs = _inputs_of(graph, policy, held)

    def run(weights, *feeds):
        outs, _ = fn(*inputs(weights, feeds), None)
        return outs

    return run


def program_together(graphs, policy: LoweringPolicy, held: HeldWeights | None = None):
    """The Graphs as one run(weights, feeds_1, feeds_2, ...) -> (fetches_1, fetches_2, ...), their linear layers
    one product each where a row's numbers do not depend on the rows beside it (shared_products.py): a
    server's decode step beside a prompt's prefill chunk reads each weight once. Each Graph is rewritten as
    `program` rewrites it, and gets its weights laid out as it reads them."""
    fn = lower_together([_rewritten(g) for g in graphs], policy)
    each = [_inputs_of(g, policy, held) for g in graphs]

    def run(weights, *feeds):
        return tuple(fn([inputs(weights, fed) for inputs, fed in zip(each, feeds)]))

    return run


def rows_in_turn(run: Callable, axes: tuple[int, ...], out_axes: tuple[int, ...]) -> Callable:
    """A batch-1 program as the program of B rows, run for one row after another (a loop on the device):
    feeds cut along their batch axes `axes`, fetches put back along `out_axes`. XLA:CPU rounds a product by
    how many rows it multiplies (a prompt of 16 tokens alone and in 32 rows: logits 1e-6 apart), so a prompt
    prefilled so gets the very numbers a server's batch-1 prefill gives it, whatever its batch.

    The feeds are (ids [B, T], mask [B, ..., T], ...), a prefill's or an extend chunk's: a row whose T tokens
    are all padding (a batch's padding row, or a chunk before a short prompt's first) is skipped, its fetches
    left zeros, which no live row reads (its K/V go into no slot; a prompt's last chunk holds its last token;
    a padding row's token is chosen from zeros and never used). So a call with one prompt prefills one row."""

    def batched(weights, *feeds):
        b, width = feeds[0].shape[axes[0]], feeds[0].shape[1]
        runs = jnp.any(feeds[1][:, -width:] != 0, axis=1)

        def one(i):
            return run(weights, *(lax.dynamic_slice_in_dim(f, i, 1, a) for f, a in zip(feeds, axes)))

        shapes = jax.eval_shape(one, 0)
        outs = tuple(jnp.zeros(s.shape[:a] + (b,) + s.shape[a + 1 :], s.dtype) for s, a in zip(shapes, out_axes))

        def body(i, outs):
            def put(outs):
                done = one(i)
                return tuple(
                    lax.dynamic_update_slice_in_dim(o, r.astype(o.dtype), i, a) for o, r, a in zip(outs, done, out_axes)
                )

            return lax.cond(runs[i], put, lambda outs: outs, outs)

        return lax.fori_loop(0, b, body, outs)

    return batched


def _rewritten(graph: Graph) -> Graph:
    return row_means.rewrite(last_logits.rewrite(gqa_rewrite.rewrite(graph)))


def _inputs_of(graph: Graph, policy: LoweringPolicy, held: HeldWeights | None):
    """inputs(weights, feeds) -> the lowered Graph's (params, buffers, feeds by name): its persistables out of
    the held weights, each in the layout this Graph reads it in."""
    names = [f.name for f in graph.feeds]
    trainable = {p.name for p in graph.params if p.trainable}
    persistables = {p.name for p in graph.params}
    flipped = _flipped(graph, policy, held)

    def inputs(weights, feeds):
        got = {k: weights[k].T if k in flipped else weights[k] for k in persistables}
        return (
            {k: got[k] for k in persistables & trainable},
            {k: got[k] for k in persistables - trainable},
            dict(zip(names, feeds)),
        )

    return inputs


def _flipped(graph: Graph, policy: LoweringPolicy, held: HeldWeights | None) -> set[str]:
    """The weights held in one [K, N] / [N, K] layout that this program reads in the other. The weights are
    held by what the decode step reads; another program (a prefill) whose op reads a weight otherwise
    decides for itself, so a weight it reads differently is transposed on the way in (a square weight
    would otherwise be read transposed, silently)."""
    int8 = held.int8 if held is not None else frozenset()
    reads = nk_weight_names(graph) - int8 if policy.nk_weights else set()
    given = (held.nk if held is not None else frozenset()) & {p.name for p in graph.params}
    return reads ^ given


def held_weights(graph: Graph, policy: LoweringPolicy, quant_type: str | None = None) -> HeldWeights:
    """Which weights the decode step reads in half (its matmul weights under bf16/fp16) or as weight-only
    int8: held so once, so that a step reads half (a quarter) of the bytes instead of converting float32
    weights on every token."""
    return HeldWeights.for_graph(graph, policy, quant_type)


def rows_of(cfg: DecodeConfig, batch: int, vocab: int) -> R.RowParams:
    """One call's decode arguments as the [batch] arrays the slots' programs take (the same for every row,
    none constrained)."""

    def full(value, dtype):
        return np.full(batch, value, dtype)

    return R.RowParams(
        full(cfg.sampling, bool),
        full(cfg.temperature, np.float32),
        full(cfg.top_k, np.int32),
        full(cfg.top_p, np.float32),
        full(cfg.repetition_penalty, np.float32),
        full(cfg.min_new_tokens, np.int32),
        full(False, bool),
        full(False, bool),
        TM.unconstrained(batch, vocab),
    )


@functools.partial(jax.jit, static_argnums=1)
def row_keys(key, batch: int):
    """Each row's random key: row 0 draws from `key` itself, so a prompt alone with seed=s samples the tokens
    a served request with seed s gets (continuous.py keys a request so); the others from key folded with
    their row (one program: a host loop of folds took 0.8 s at 2048 rows)."""
    others = jax.vmap(lambda r: jax.random.fold_in(key, r))(jnp.arange(1, batch, dtype=jnp.uint32))
    return jnp.concatenate([key[None], others])


class BatchEngine:
    """Generates for up to `geometry.max_batch_size` prompts within `geometry.max_length` cache slots.

    step: run(weights, ids [B,1], mask [B,S+1], pos [B,1], past) -> (logits, new K/V);
    prefill_for(bucket) -> run(weights, ids, mask, pos) -> (logits, K/V), made on first use;
    extend: run(weights, ids [B,c], mask [B,S+c], pos [B,c], past) -> (logits, the chunk's K/V), c the
    geometry's prefill_chunk (needed when geometry.chunked: longer prompts are prefilled in chunks);
    weights: name -> array as the programs read them (held.py's precision and layout);
    place: puts them on the devices (default: jax.device_put; a tensor-split generator shards them);
    rows_in_turn: the prefills run one row at a time (generate_programs.py), so a plain decoder's prompts
    may differ in length."""

    def __init__(
        self,
        geometry: Geometry,
        defaults: DecodeConfig,
        step: Callable,
        prefill_for: Callable[[int], Callable],
        weights: Mapping,
        seed: int = 0,
        place: Callable | None = None,
        extend: Callable | None = None,
        rows_in_turn: bool = False,
    ):
        if geometry.chunked and extend is None:
            raise GenerationError(f"prefill_chunk={geometry.prefill_chunk} needs the extend program")
        ensure_compile_cache()  # NOTE: before the first of this engine's programs compiles
        self.geometry, self.defaults = geometry, defaults
        self._step, self._prefill_for, self._extend = step, prefill_for, extend
        self._weights = dict(weights)
        self._place = place or jax.device_put
        self._params = None
        self._prefills: dict[int, Callable] = {}
        self._starts: dict = {}
        self._absorbs: dict = {}
        self._runs: dict = {}
        self._key = jax.random.PRNGKey(seed)
        self._calls = itertools.count()
        self.name = "language model"  # NOTE: what the compile progress lines call it (px.Generator: the class)
        self.rows_in_turn = rows_in_turn

    # ---- programs: a start per prompt bucket, one decode chunk (per eos and pad ids) ----
    def _prefill(self, bucket: int):
        if bucket not in self._prefills:
            self._prefills[bucket] = self._prefill_for(bucket)
        return self._prefills[bucket]

    def _start_fn(self, bucket, eos, pad):
        if (bucket, eos) not in self._starts:
            prefill, g = self._prefill(bucket), self.geometry
            self._starts[(bucket, eos)] = self._shown(
                f"prefill bucket {bucket}",
                jax.jit(
                    lambda w, ids, mask, live, limit, params, keys: SL.start(
                        prefill, w, ids, mask, live, limit, params, keys, g.max_length, g.cache_dtype, eos
                    )
                ),
            )
        return self._starts[(bucket, eos)]

    def _absorb_fn(self, eos):
        if eos not in self._absorbs:
            extend = self._extend
            what = f"chunked prefill ({self.geometry.prefill_chunk} tokens a chunk)"
            self._absorbs[eos] = self._shown(
                what,
                jax.jit(
                    lambda w, s, ids, mask, fresh, last, live, limit, params, keys: SL.absorb(
                        extend, w, s, ids, mask, fresh, last, live, limit, params, keys, eos
                    )[0],
                    donate_argnums=(1,),
                ),
            )
        return self._absorbs[eos]

    def _run_fn(self, eos, pad):
        if (eos, pad) not in self._runs:
            step, chunk = self._step, self.geometry.chunk
            self._runs[(eos, pad)] = self._shown(
                f"decode chunk of {chunk} tokens",
                jax.jit(lambda w, s: SL.run(step, w, s, chunk, eos, pad), donate_argnums=(1,)),
            )
        return self._runs[(eos, pad)]

    def _shown(self, what: str, fn: Callable) -> Callable:
        """fn (a jitted program), its first call, which compiles it, shown as px.compile's are: a spinner on a
        terminal, else a line once it has taken a while (runtime/compile_cache.py's compile_progress)."""
        first = [True]

        def call(*args):
            if not first[0]:
                return fn(*args)
            first[0] = False
            with compile_progress(
                f"{self.name}: {what} (batch of {self.geometry.max_batch_size} rows, "
                f"context {self.geometry.max_length})"
            ):
                return fn(*args)

        call.lower = fn.lower  # NOTE: still a jitted program to lower (tests read its HLO)
        return call

    def _device_params(self):
        if self._params is None:
            self._params = self._place(self._weights)
        return self._params

    # ---- generate ----
    def generate(self, input_ids, attention_mask=None, seed: int | None = None, **kwargs):
        """(new token ids [batch, T] int64, mean scores [batch, 1] float32), as PaddleFormers' generate."""
        cfg = decode_config(self.defaults, **kwargs)
        ids, mask = self._inputs(input_ids, attention_mask, cfg)
        batch, width = ids.shape
        self._check_lengths(width, mask, cfg)
        key = jax.random.PRNGKey(seed) if seed is not None else jax.random.fold_in(self._key, next(self._calls))
        eos, pad = tuple(cfg.eos_token_id), cfg.pad_token_id
        b = self.geometry.max_batch_size
        with x64.scope():
            params = self._device_params()
            live = np.arange(b) < batch
            state = self._prefilled(params, ids, mask, live, cfg, row_keys(key, b))
            chunks = [np.where(live, np.asarray(state.token), pad)[:, None]]
            run = self._run_fn(eos, pad)
            while bool(np.asarray(state.live).any()):
                state, out, _ = run(params, state)
                chunks.append(np.asarray(out))
            scores = np.asarray(state.scores)
        out = np.concatenate(chunks, axis=1)[:batch]
        made = out != SL.NO_TOKEN
        out = out[:, : int(made.any(axis=0).nonzero()[0].max()) + 1]
        return np.where(out == SL.NO_TOKEN, pad, out).astype(np.int64), scores[:batch, None].astype(np.float32)

    def _prefilled(self, params, ids, mask, live, cfg, keys):
        """The slots with every row's prompt in its cache and its first token chosen: one prefill of the
        prompts' bucket, or (longer than prefill_chunk) the extend program a chunk at a time."""
        g, eos, b = self.geometry, tuple(cfg.eos_token_id), self.geometry.max_batch_size
        limit, rows = np.full(b, cfg.max_new_tokens, np.int32), rows_of(cfg, b, g.vocab_size)
        bucket, c = g.bucket(ids.shape[1]), g.prefill_chunk
        if bucket is not None:
            ids, mask = padded(ids, mask, bucket, b, cfg.pad_token_id)
            return self._start_fn(bucket, eos, cfg.pad_token_id)(params, ids, mask, live, limit, rows, keys)
        ids, mask = chunk_layout(ids, mask, c, b, cfg.pad_token_id)
        width = ids.shape[1]
        state = SL.empty((2 * g.layers, b, g.kv_heads, g.max_length, g.head_dim), g.cache_dtype, g.vocab_size)
        for i in range(0, width, c):
            state = self._absorb_fn(eos)(
                params,
                state,
                ids[:, i : i + c],
                mask[:, i : i + c],
                np.full(b, i == 0),
                np.bool_(i + c == width),
                live,
                limit,
                rows,
                keys,
            )
        return state

    def warm_up(self, buckets=None, **kwargs) -> None:
        """Compile the prefill of every bucket (or those given), the chunked prefill when prompts are
        chunked, and the decode loop, for these arguments."""
        g = self.geometry
        for i, bucket in enumerate(buckets or g.buckets):
            # NOTE: the decode loop is one program for every bucket: compiled once, with the first
            two = i == 0 and bucket < g.max_length
            self.generate(np.ones((1, bucket), np.int64), max_new_tokens=2 if two else 1, **kwargs)
        if g.chunked and buckets is None:
            self.generate(np.ones((1, g.prefill_chunk + 1), np.int64), max_new_tokens=1, **kwargs)

    def _inputs(self, input_ids, attention_mask, cfg):
        ids = np.asarray(input_ids.numpy() if hasattr(input_ids, "numpy") else input_ids)
        g = self.geometry
        if ids.ndim != 2 or ids.dtype.kind not in "iu" or ids.shape[1] == 0:
            raise GenerationError(
                f"input_ids must be integer token ids [batch, length >= 1], got {ids.dtype} {ids.shape}"
            )
        if ids.shape[0] > g.max_batch_size:
            raise GenerationError(
                f"{ids.shape[0]} prompts > max_batch_size={g.max_batch_size}: split the batch "
                "or build the Generator with a larger max_batch_size"
            )
        bad = (ids < 0) | (ids >= g.vocab_size)
        if bad.any():
            raise GenerationError(f"token id {int(ids[bad][0])} is outside the vocabulary [0, {g.vocab_size})")
        if attention_mask is None:
            # NOTE: PaddleFormers: padding is where ids equal pad_token_id, if it occurs and is not also eos;
            # a plain decoder (one_length) has no pad token, so every id is a token
            pad = cfg.pad_token_id
            has_pad = not g.one_length and (ids == pad).any() and pad not in cfg.eos_token_id
            mask = (ids != pad) if has_pad else np.ones_like(ids)
        else:
            mask = np.asarray(attention_mask.numpy() if hasattr(attention_mask, "numpy") else attention_mask)
            if mask.shape != ids.shape:
                raise GenerationError(f"attention_mask shape {mask.shape} differs from input_ids' {ids.shape}")
        mask = (mask != 0).astype(np.int64)
        if g.one_length and not self.rows_in_turn and (mask != mask[:1]).any():
            raise GenerationError(
                "this model has no cache API, so the prompts of one generate call share their "
                f"positions and must have one length (got {sorted(set(mask.sum(-1).tolist()))} "
                "tokens): call generate once per prompt length"
            )
        return ids.astype(np.int64), mask

    def _check_lengths(self, width, mask, cfg):
        g = self.geometry
        if width > g.max_length:
            raise GenerationError(
                f"the prompt ({width} tokens) is longer than max_length={g.max_length}: "
                "build the Generator with a larger max_length"
            )
        # NOTE: a prompt's K/V fill slots from its first real token on (slots.packed): its padding costs no room
        span = width - int(np.argmax(mask != 0, axis=1).min()) if mask.any() else 1
        room = g.max_length - span + 1
        if cfg.max_new_tokens > room:
            raise GenerationError(
                f"max_new_tokens={cfg.max_new_tokens} does not fit the cache: a prompt of {span} "
                f"tokens leaves room for {room} in max_length={g.max_length}"
            )


def chunk_layout(ids, mask, chunk: int, rows: int, pad: int):
    """ids and mask [B, w] laid out for a chunked prefill as [rows, K * chunk]: each row's real tokens in
    whole chunks from its first token, its last (partial) chunk left-padded, and its chunks right-aligned
    (a shorter row's first chunks are padding). So a token's K/V are computed in the same chunk, beside the
    same tokens, whatever follows it in the prompt: a prefix's blocks are then the same numbers in every
    prompt that begins with it (the prefix cache's hits change no result, paged_engine.py). Padding repeats
    the row's first id, as `padded` does."""
    real = [row[m != 0] for row, m in zip(np.asarray(ids), np.asarray(mask))]
    counts = [max(1, -(-len(r) // chunk)) for r in real]
    width = max(counts) * chunk
    out = np.full((rows, width), pad, np.int64)
    m = np.zeros((rows, width), np.int64)
    out[: len(real)] = np.asarray(ids)[:, :1]
    for i, (r, k) in enumerate(zip(real, counts)):
        whole, start = (k - 1) * chunk, width - k * chunk
        out[i, start : start + whole], m[i, start : start + whole] = r[:whole], 1
        tail = len(r) - whole
        out[i, width - tail :], m[i, width - tail :] = r[whole:], 1
    return out, m


def padded(ids, mask, width: int, rows: int, pad: int):
    """ids and mask [B, w] left-padded to [rows, width]. The added padding repeats each row's first id, so that
    it adds no token to the ids the repetition penalty counts (a PaddleFormers row holds only its own
    padding); rows past B (they only fill the batch) are all pad_token_id."""
    out = np.full((rows, width), pad, np.int64)
    m = np.zeros((rows, width), np.int64)
    out[: ids.shape[0]] = ids[:, :1]
    out[: ids.shape[0], width - ids.shape[1] :] = ids
    m[: ids.shape[0], width - ids.shape[1] :] = mask
    return out, m
