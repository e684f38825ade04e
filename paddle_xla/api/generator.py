"""px.Generator: text generation with an unchanged PaddleFormers causal LM, compiled for fixed shapes.

    gen = px.Generator(model, max_batch_size=8, max_length=512, strategy=px.Strategy(precision="bf16"))
    ids, scores = gen.generate(input_ids, attention_mask=mask, max_new_tokens=64)
    px.export(gen, "llm.pxa", tokenizer=tokenizer)       # artifact/generator_writer.py

The model is captured twice (capture/causal_lm.py): a prefill per prompt bucket and one decode step.
generation/batch_engine.py generates with them (Paddle-free, the same engine a loaded artifact uses).
`generate` takes PaddleFormers' arguments with its defaults (generation/config.py) and returns what its
`generate` returns: the new tokens [batch, T] (pad after a row's EOS, T the steps run) and each row's
mean score [batch, 1], as NumPy arrays.
"""

from __future__ import annotations

import dataclasses
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from .. import x64
from ..capture.causal_lm import (
    cache_geometry,
    capture_decode,
    capture_forward,
    capture_prefill,
    check_causal,
    has_cache_api,
    vocab_size,
)
from ..errors import GenerationError
from ..generation import all_logits, derive
from ..generation.batch_engine import BatchEngine, Geometry, held_weights, program
from ..generation.config import DecodeConfig, token_ids
from ..generation.continuous import ContinuousEngine, continuous_engine, made_on_first_call
from ..generation.generate_programs import generate_program
from ..generation.paged_engine import PagedEngine, paged_engine
from ..generation.speculative.engine import NOT_SERVED, SpeculativeEngine
from ..generation.speculative.served import paged_engine_type
from ..lowering.policy import LoweringPolicy
from ..parallel.mesh import make_mesh
from ..parallel.pack import split_dim, tensor_spec
from ..parallel.tensor_plan import tensor_plan_for
from ..strategy import Strategy
from .speculative import speculative_engine, verify_graph

if TYPE_CHECKING:
    import paddle

    from ..capture.sources import Captured
    from ..graph import Graph


def _checked(strategy: Strategy | None) -> Strategy:
    """The Strategy a generator honours: precision, and tensor (with tensor_plan) to split its weights."""
    if strategy is None:
        return Strategy()
    if not isinstance(strategy, Strategy):
        raise GenerationError(f"strategy must be a px.Strategy, not {type(strategy).__name__}")
    honoured = Strategy(
        precision=strategy.precision,
        tensor=strategy.tensor,
        tensor_plan=strategy.tensor_plan,
        quant_type=strategy.quant_type,
    )
    if strategy != honoured:
        raise GenerationError(
            "px.Generator takes a Strategy's precision, quant_type, tensor and tensor_plan only "
            f"(replicas, stages and the rest are for training): got {strategy}"
        )
    if strategy.quant_type is not None and strategy.tensor > 1:
        raise GenerationError(
            f"quant_type={strategy.quant_type!r} with tensor={strategy.tensor} is not supported yet: "
            "an int8 weight's values and scales are not split over devices; drop one of them"
        )
    return strategy


def _placement(strategy: Strategy, captured: Captured) -> Callable[[Mapping[str, Any]], dict[str, jax.Array]] | None:
    """None on one device; else a function placing the weights over a (1, 1, tensor) mesh as the tensor
    plan splits them (parallel/tensor_plan.py), so that GSPMD splits the prefill and decode programs."""
    if strategy.tensor == 1:
        return None
    plan = tensor_plan_for(captured.graph, captured.state_keys, strategy)
    assert plan is not None  # NOTE: tensor > 1 always makes one
    mesh = make_mesh(strategy)

    def place(weights: Mapping[str, Any]) -> dict[str, jax.Array]:
        out = {}
        for name, value in weights.items():
            dim = split_dim(np.shape(value), plan.dims.get(name), strategy.tensor)
            spec = P() if dim is None else P(*tensor_spec(np.ndim(value), dim))
            out[name] = jax.device_put(value, NamedSharding(mesh, spec))
        return out

    return place


def defaults_of(config: Any) -> DecodeConfig:
    """generate's defaults from the model's config: its eos_token_id, and pad_token_id (eos when it has none,
    as PaddleFormers falls back). A model without a config never ends a row early."""
    eos_ids = token_ids(getattr(config, "eos_token_id", None))
    pad = getattr(config, "pad_token_id", None)
    return DecodeConfig(eos_token_id=eos_ids, pad_token_id=pad if pad is not None else (eos_ids[0] if eos_ids else 0))


_FP32 = LoweringPolicy()


class _CacheApi:
    """A PaddleFormers causal LM: its own cache class, captured around it (capture/causal_lm.py)."""

    def __init__(self, model: paddle.nn.Layer, batch: int, slots: int) -> None:
        self.model, self.batch = model, batch
        self.layers, self.kv_heads, self.head_dim = cache_geometry(model)
        self.one_length = False
        with x64.scope():
            self.decode = capture_decode(model, batch, slots)

    def prefill(self, bucket: int, batch: int | None = None) -> Captured:
        with x64.scope():
            return capture_prefill(self.model, batch or self.batch, bucket)

    def any_bucket(self) -> Captured:
        """The decode step with symbolic rows and slots: one Graph for every bucket a paged engine runs."""
        with x64.scope():
            return capture_decode(self.model, None, None)

    def extend_any(self, tokens: int) -> Captured:
        """The decode step on `tokens` new tokens with symbolic rows and slots (a paged engine's verify step)."""
        with x64.scope():
            return capture_decode(self.model, None, None, tokens=tokens)

    def extend(self, tokens: int, slots: int, batch: int | None = None) -> Captured:
        """The decode step on `tokens` new tokens: a long prompt's prefill, a chunk at a time."""
        with x64.scope():
            return capture_decode(self.model, batch or self.batch, slots, tokens=tokens)


class _Derived:
    """A plain decoder (forward(input_ids) -> logits, no cache API): the cache derived from its forward
    (generation/derive.py), checked against the forward before use. The rows of one call of a derived program
    share their positions, so generate and a server run one row's programs for each row (rows_in_turn,
    derive.per_row) and prompts of any length go together (in an artifact exported since, too)."""

    def __init__(self, model: paddle.nn.Layer, batch: int, slots: int, vocab: int, first_bucket: int) -> None:
        with x64.scope():
            self.forward = capture_forward(model, batch)
        self.model, self.batch, self.one_length = model, batch, True
        self._forward1: Captured | None = None
        first = self.prefill(first_bucket)
        with x64.scope():
            cache = jax.eval_shape(
                program(first.graph, _FP32),
                dict(first.weights),
                *[jnp.zeros(f.shape, jnp.int64) for f in first.graph.feeds],
            )[1]
        entries, _, self.kv_heads, _, self.head_dim = cache.shape
        self.layers = entries // 2
        step = derive.derive(self.forward.graph, batch, 1, slots)
        past = dataclasses.replace(step.feeds[-1], shape=(entries, batch, self.kv_heads, slots, self.head_dim))
        self.decode = dataclasses.replace(
            self.forward, graph=dataclasses.replace(step, feeds=step.feeds[:-1] + (past,))
        )
        derive.check_against_forward(
            self.forward.graph, first.graph, self.decode.graph, dict(self.forward.weights), slots, vocab
        )

    def _forward_of(self, batch: int) -> Captured:
        """The forward captured for `batch` rows: the generator's, or one row's (a server's), captured on first use."""
        if batch == self.batch:
            return self.forward
        assert batch == 1  # NOTE: a server prefills one request at a time
        if self._forward1 is None:
            with x64.scope():
                self._forward1 = capture_forward(self.model, 1)
        return self._forward1

    def prefill(self, bucket: int, batch: int | None = None) -> Captured:
        forward = self._forward_of(batch or self.batch)
        return dataclasses.replace(forward, graph=derive.derive(forward.graph, batch or self.batch, bucket, None))

    def any_bucket(self) -> Captured:
        """One row's decode step over any number of slots, run per row (derive.per_row)."""
        forward = self._forward_of(1)
        return dataclasses.replace(forward, graph=derive.one_row_step(forward.graph))


class Generator:
    """Generates with `model` for up to `max_batch_size` prompts and `max_length` cache slots.

    A PaddleFormers causal LM keeps its own cache class; a plain decoder (forward(input_ids) -> logits)
    gets a cache derived from its forward.

    chunk: decode steps per device call. prefill_chunk: prompts longer than this are prefilled this many
    tokens at a time against the cache (one program for every length), shorter ones whole in a bucket of
    16, 32, ... tokens; a server interleaves those chunks with its running streams' decode steps. A plain
    decoder's derived cache prefills whole prompts (buckets up to max_length)."""

    def __init__(
        self,
        model: paddle.nn.Layer,
        max_batch_size: int = 8,
        max_length: int = 512,
        chunk: int = 16,
        seed: int = 0,
        strategy: Strategy | None = None,
        prefill_chunk: int = 128,
        speculative_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.speculative: SpeculativeEngine | None = None
        self.strategy = _checked(strategy)
        precision = self.strategy.precision
        vocab = vocab_size(model)
        check_causal(model, vocab)
        probe = Geometry(
            max_batch_size, max_length, 1, 1, 1, vocab, chunk, precision, quant_type=self.strategy.quant_type
        )
        self._source = (
            _CacheApi(model, max_batch_size, max_length)
            if has_cache_api(model)
            else _Derived(model, max_batch_size, max_length, vocab, probe.buckets[0])
        )
        src = self._source
        self.geometry = dataclasses.replace(
            probe,
            layers=src.layers,
            kv_heads=src.kv_heads,
            head_dim=src.head_dim,
            one_length=src.one_length,
            prefill_chunk=None if src.one_length else prefill_chunk,
        )
        self.policy = LoweringPolicy.live(precision, inference=True)
        if self.strategy.tensor > 1:
            # NOTE: the tensor plan places weights by Paddle's [K, N] dimensions
            self.policy = dataclasses.replace(self.policy, nk_weights=False)
        self.defaults = defaults_of(getattr(model, "config", None))
        self.decode_captured = src.decode
        self.source_weights = dict(self.decode_captured.weights)  # as Paddle holds them (export writes these)
        self.held = held_weights(self.decode_captured.graph, self.policy, self.geometry.quant_type)
        self._prefill_captured: dict[int, Captured] = {}
        self._prefill1_captured: dict[int, Captured] = {}
        self._continuous: ContinuousEngine | None = None
        self._decode_any: Captured | None = None
        self._extend_captured: dict[int, Captured] = {}
        self._verify_graphs: dict[tuple[int, bool], Graph] = {}
        self.engine = BatchEngine(
            self.geometry,
            self.defaults,
            self._generate_program("decode"),
            lambda bucket: self._generate_program(f"prefill_{bucket}"),
            self.held.all_prepared(self.source_weights),
            seed=seed,
            place=_placement(self.strategy, self.decode_captured),
            # NOTE: captured when it first runs: a generator may never see a prompt that long
            extend=made_on_first_call(lambda: self._generate_program("extend")) if self.geometry.chunked else None,
            rows_in_turn=True,
        )
        self.engine.name = type(model).__name__  # NOTE: its compiles' progress lines name the model
        if speculative_config is not None:
            self.speculative = speculative_engine(self, speculative_config)

    @property
    def max_batch_size(self) -> int:
        return self.geometry.max_batch_size

    @property
    def max_length(self) -> int:
        return self.geometry.max_length

    def prefill_captured(self, bucket: int) -> Captured:
        """The prefill for prompts left-padded to `bucket` tokens, captured on first use."""
        if bucket not in self._prefill_captured:
            self._prefill_captured[bucket] = self._same_weights(self._source.prefill(bucket))
        return self._prefill_captured[bucket]

    def _same_weights(self, captured: Captured) -> Captured:
        """`captured`, refused where it reads a weight the decode step does not (two captures disagree)."""
        missing = set(captured.weights) - set(self.source_weights)
        if missing:
            raise GenerationError(
                f"the prefill reads weights the decode step does not ({sorted(missing)[:3]}): "
                "the two captures of the model disagree"
            )
        return captured

    def extend_captured(self, batch: int) -> Captured | None:
        """The prefill chunk program for `batch` rows (the generator's batch, or 1 for a server's inserts),
        captured on first use; None when prompts are not chunked."""
        if not self.geometry.chunked:
            return None
        if batch not in self._extend_captured:
            g, src = self.geometry, self._source
            assert isinstance(src, _CacheApi) and g.prefill_chunk is not None  # NOTE: what makes it chunked
            self._extend_captured[batch] = src.extend(g.prefill_chunk, g.max_length, batch)
        return self._extend_captured[batch]

    def _extend_graph(self, batch: int) -> Graph:
        captured = self.extend_captured(batch)
        assert captured is not None  # NOTE: asked for only where prompts are chunked
        return captured.graph

    def _generate_program(self, name: str) -> Callable:
        """generate's program `name`, made from the Graphs a server runs (generation/generate_programs.py)."""
        return generate_program(name, self._graph_of, self.policy, self.held, self.geometry.one_length)

    def generate(
        self, input_ids: Any, attention_mask: Any = None, seed: int | None = None, **kwargs: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """(new token ids [batch, T] int64, mean scores [batch, 1] float32), as PaddleFormers' generate."""
        run = self.speculative or self.engine
        return run.generate(input_ids, attention_mask=attention_mask, seed=seed, **kwargs)

    @property
    def speculative_stats(self) -> dict | None:
        """Speculation's counts so far (verify steps, guesses made and kept, kept per step), or None."""
        return None if self.speculative is None else self.speculative.stats.as_dict()

    def verify_graph(self, width: int, any_rows: bool = False) -> Graph:
        """The extend step over `width` tokens per row with every position's logits (speculative decoding's
        verify step), at the generator's rows and slots (any_rows: symbolic rows and slots, a paged engine's),
        captured on first use."""
        if (width, any_rows) not in self._verify_graphs:
            self._verify_graphs[(width, any_rows)] = verify_graph(self, width, any_rows)
        return self._verify_graphs[(width, any_rows)]

    def verify_program(self, width: int, any_rows: bool = False) -> Callable:
        """verify_graph(width, any_rows) as a program over the generator's held weights."""
        return program(self.verify_graph(width, any_rows), self.policy, self.held)

    def prefill1_captured(self, bucket: int) -> Captured:
        """The batch-1 prefill a server inserts one request with (and generate runs row by row), captured on
        first use."""
        if bucket not in self._prefill1_captured:
            self._prefill1_captured[bucket] = self._same_weights(self._source.prefill(bucket, batch=1))
        return self._prefill1_captured[bucket]

    def continuous(self) -> ContinuousEngine:
        """The engine a server runs: requests inserted into free rows between decode chunks (made once)."""
        if self.speculative is not None:
            warnings.warn(NOT_SERVED, stacklevel=2)
        if self._continuous is None:
            shared = (self._graph_of, self.policy, self.held) if self.policy.nk_weights else None
            self._continuous = continuous_engine(
                self.geometry,
                self.defaults,
                self.held.all_prepared(self.source_weights),
                lambda name: program(self._graph_of(name), self.policy, self.held),
                shared_products=shared,
                place=_placement(self.strategy, self.decode_captured),
            )
        return self._continuous

    def paged(
        self,
        kv_cache_tokens: int | None = None,
        block_size: int = 16,
        max_seqs: int | None = None,
        batch_invariant: bool = True,
        prefix_cache: bool = True,
        kv_cache_memory: float | None = None,
    ) -> PagedEngine:
        """A server's engine over a paged KV cache (generation/paged_engine.py): `kv_cache_tokens` slots
        (default: max_batch_size x max_length, the memory of continuous()'s rows; or kv_cache_memory, a
        fraction of the device's memory left after the weights) in blocks of `block_size`,
        up to `max_seqs` requests at once, reusing cached prompt prefixes unless prefix_cache is False."""
        engine_type = paged_engine_type(self.speculative, lambda w: self.verify_program(w, any_rows=True))
        return paged_engine(
            self.geometry,
            self.defaults,
            self.held.all_prepared(self.source_weights),
            lambda name: program(all_logits.named(self._graph_of, name), self.policy, self.held),
            kv_cache_tokens=kv_cache_tokens,
            block_size=block_size,
            max_seqs=max_seqs,
            place=_placement(self.strategy, self.decode_captured),
            batch_invariant=batch_invariant,
            prefix_cache=prefix_cache,
            kv_cache_memory=kv_cache_memory,
            engine_type=engine_type,
        )

    def any_bucket_captured(self) -> Captured:
        """The decode step captured with symbolic rows and cache slots (a paged engine's every bucket),
        on first use."""
        if self._decode_any is None:
            self._decode_any = self._source.any_bucket()
        return self._decode_any

    def _graph_of(self, name: str) -> Graph:
        """A continuous engine's program's Graph by its artifact name (decode, prefill1_<bucket>, extend1),
        captured on first use."""
        if name == "decode":
            return self.decode_captured.graph
        if name == "decode_any":
            return self.any_bucket_captured().graph
        if name == "extend1":
            return self._extend_graph(1)
        return self.prefill1_captured(int(name.removeprefix("prefill1_"))).graph

    def warm_up(self, **kwargs: Any) -> None:
        """Capture and compile every prompt bucket's prefill and the decode loop (for these arguments)."""
        (self.speculative or self.engine).warm_up(**kwargs)


_GENERATORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def generate(
    model: paddle.nn.Layer,
    input_ids: Any,
    attention_mask: Any = None,
    max_batch_size: int | None = None,
    max_length: int | None = None,
    **kwargs: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """One call: a Generator kept per model (and size), then its generate."""
    batch = np.shape(input_ids)[0]
    rows = max_batch_size or batch
    length: int = max_length if max_length else getattr(getattr(model, "config", None), "max_position_embeddings", 512)
    gens = _GENERATORS.setdefault(model, {})
    key = (rows, length)
    if key not in gens:
        gens[key] = Generator(model, max_batch_size=rows, max_length=length)
    return gens[key].generate(input_ids, attention_mask=attention_mask, **kwargs)
