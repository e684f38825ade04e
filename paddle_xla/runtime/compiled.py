"""Compiled programs: weights on the device, feeds checked, one executable per input shape."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import x64
from ..errors import StrategyError
from ..graph import Graph
from ..lowering.interpreter import check_message, draws_random, fail_on_false_flags, raise_failed_check
from ..lowering.lower import checked_ops, lower
from ..lowering.policy import LoweringPolicy
from . import feeds as feeds_mod
from .executables import ExecutableCache, shapes_text
from .held import HeldWeights
from .xla_options import inference_options


@x64.methods
class CompiledModel:
    """A Graph with its weights, ready to run: `model(*inputs) -> outputs` (NumPy in, NumPy out).

    Shapes are static per compile: each new input shape compiles once and is cached. Random ops
    draw anew on every call, from the seed (or `key`) folded with the call's number, so a model
    built with the same seed gives the same sequence of draws."""

    def __init__(
        self,
        graph: Graph,
        weights: Mapping[str, np.ndarray],
        seed: int = 0,
        key=None,
        strategy=None,
        policy: LoweringPolicy | None = None,
    ):
        self.graph = graph
        self.source_weights: Mapping[str, Any] = weights  # as Paddle laid them out (export writes these)
        # NOTE: inference honours Strategy.precision only: half compute, float32 weights and outputs.
        if strategy is not None and strategy.quant_type is not None:
            raise StrategyError(
                f"Strategy(quant_type={strategy.quant_type!r}) applies to px.Generator only; "
                "px.compile runs the weights as Paddle holds them (or in half, with precision=)"
            )
        precision = strategy.precision if strategy is not None else "fp32"
        self.policy = policy or LoweringPolicy.live(precision, inference=True)
        # NOTE: weights the executable reads in another precision or layout than Paddle's (held.py),
        # prepared once here, not on every call; set_weights applies the same to new values.
        self.held = HeldWeights.for_graph(graph, self.policy)
        self._fn = lower(graph, self.policy, checks=True)
        self._checks = checked_ops(graph)
        params = {p.name: self.held.prepared(p.name, weights[p.name]) for p in graph.params}
        self.params = jax.device_put({k: v for k, v in params.items() if _is_trainable(graph, k)})
        self.buffers = jax.device_put({k: v for k, v in params.items() if not _is_trainable(graph, k)})
        self._key = key if key is not None else jax.random.key(seed)
        self._random = draws_random(graph)
        self._calls = itertools.count()
        self._jitted = jax.jit(self._fn)
        self._executables = ExecutableCache()

    def set_weights(self, values: Mapping[str, Any]) -> None:
        """Replace weights by name, given as Paddle lays them out (e.g. a train step's current ones).

        Device arrays are copied: their owner (a train step donates its weights to its next step) may
        delete them while this model still runs."""
        mine = {
            k: jnp.copy(v) if isinstance(v, jax.Array) else v
            for k, v in values.items()
            if k in self.params or k in self.buffers
        }
        self.source_weights = {**self.source_weights, **mine}
        prepared = jax.device_put(self.held.all_prepared(mine))
        self.params = {**self.params, **{k: v for k, v in prepared.items() if k in self.params}}
        self.buffers = {**self.buffers, **{k: v for k, v in prepared.items() if k in self.buffers}}

    @property
    def key(self):
        """The PRNG key this model's random draws start from (call i draws from fold_in(key, i))."""
        return self._key

    def call_key(self):
        """The key of the next call: a fresh one per call when the program draws random numbers."""
        if not self._random:
            return self._key
        return jax.random.fold_in(self._key, next(self._calls))

    @property
    def input_names(self) -> list[str]:
        return [f.name for f in self.graph.feeds]

    @property
    def output_names(self) -> list[str]:
        return [f.name for f in self.graph.fetches]

    @property
    def compile_seconds(self) -> dict[tuple, float]:
        return self._executables.compile_seconds

    def feeds(self, args, kwargs) -> dict[str, Any]:
        return feeds_mod.checked(self.graph.feeds, args, kwargs)

    def executable(self, feeds: Mapping[str, Any]):
        """The compiled executable for these input shapes (compiled on first use)."""
        return self._executables.get(
            feeds,
            lambda: self._jitted.lower(self.params, self.buffers, feeds, self._key).compile(
                compiler_options=inference_options(self.graph)
            ),
            lambda sig: f"{self.graph.meta.get('source', 'model')} for {shapes_text(sig)}",
        )

    def run(self, *args, **kwargs) -> list[jax.Array]:
        """Outputs as device arrays (no host copy)."""
        return self.run_checked(self.feeds(args, kwargs), self.call_key())

    def run_checked(self, feeds: Mapping[str, Any], key) -> list[jax.Array]:
        """Outputs for feeds already checked (self.feeds), drawing random numbers from `key`; raises
        CheckFailedError when an assert of the program is false for them."""
        try:
            fetches, _ = self.executable(feeds)(self.params, self.buffers, feeds, key)
        except jax.errors.JaxRuntimeError as e:
            raise_failed_check(e)
            raise
        n = len(self.graph.fetches)
        fail_on_false_flags(fetches[n:], [check_message(op) for op in self._checks])
        return list(fetches[:n])

    def jaxpr(self, *args, **kwargs):
        """The program XLA compiles for these inputs, as a closed jaxpr (with the weights as prepared:
        half, HWIO), e.g. to count its FLOPs."""
        return jax.make_jaxpr(self._fn)(self.params, self.buffers, self.feeds(args, kwargs), self._key)

    def __call__(self, *args, **kwargs) -> list[np.ndarray] | np.ndarray:
        outs = [np.asarray(o) for o in self.run(*args, **kwargs)]
        return outs[0] if len(outs) == 1 else outs


def _is_trainable(graph: Graph, name: str) -> bool:
    return next(p.trainable for p in graph.params if p.name == name)
