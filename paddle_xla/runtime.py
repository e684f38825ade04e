"""Compiled programs: weights on the device, feeds checked, one executable per input shape."""
from __future__ import annotations

import time
from typing import Any, Mapping

import jax
import numpy as np

from . import feeds as feeds_mod
from .cache import compile_progress
from .graph import Graph
from .lower import lower
from .train.precision import HALF, half_weight_names, lower_mixed
from .xla_options import inference_options


class CompiledModel:
    """A Graph with its weights, ready to run: `model(*inputs) -> outputs` (NumPy in, NumPy out).

    Shapes are static per compile: each new input shape compiles once and is cached."""

    def __init__(self, graph: Graph, weights: Mapping[str, np.ndarray], seed: int = 0, key=None, strategy=None):
        self.graph = graph
        # NOTE: inference honours Strategy.precision only: half compute, float32 weights and outputs.
        precision = strategy.precision if strategy is not None else "fp32"
        self._fn = lower(graph) if precision == "fp32" else lower_mixed(graph, precision)
        params = {p.name: weights[p.name] for p in graph.params}
        if precision != "fp32":
            # NOTE: matmul/conv weights are cast to half once here, not on every call (BERT-Base bf16: -20 %).
            half = HALF[precision]
            params.update({k: np.asarray(params[k], dtype=np.float32).astype(half) for k in half_weight_names(graph)})
        self.params = jax.device_put({k: v for k, v in params.items() if _is_trainable(graph, k)})
        self.buffers = jax.device_put({k: v for k, v in params.items() if not _is_trainable(graph, k)})
        self._key = key if key is not None else jax.random.key(seed)
        self._jitted = jax.jit(self._fn)
        self._compiled: dict[tuple, Any] = {}
        self.compile_seconds: dict[tuple, float] = {}

    @property
    def key(self):
        """The PRNG key random ops draw from when this model runs."""
        return self._key

    @property
    def input_names(self) -> list[str]:
        return [f.name for f in self.graph.feeds]

    @property
    def output_names(self) -> list[str]:
        return [f.name for f in self.graph.fetches]

    def feeds(self, args, kwargs) -> dict[str, Any]:
        bound = feeds_mod.bind(self.graph.feeds, args, kwargs)
        return {f.name: feeds_mod.check(f, bound[f.name]) for f in self.graph.feeds}

    def executable(self, feeds: Mapping[str, Any]):
        """The compiled executable for these input shapes (compiled on first use)."""
        sig = tuple((k, tuple(v.shape), str(v.dtype)) for k, v in sorted(feeds.items()))
        exe = self._compiled.get(sig)
        if exe is None:
            start = time.perf_counter()
            shapes = {k: list(s) for k, s, _ in sig}
            with compile_progress(f"{self.graph.meta.get('source', 'model')} for {shapes}"):
                exe = self._jitted.lower(self.params, self.buffers, feeds, self._key).compile(
                    compiler_options=inference_options(self.graph))
            self.compile_seconds[sig] = time.perf_counter() - start
            self._compiled[sig] = exe
        return exe

    def run(self, *args, **kwargs) -> list[jax.Array]:
        """Outputs as device arrays (no host copy)."""
        feeds = self.feeds(args, kwargs)
        fetches, _ = self.executable(feeds)(self.params, self.buffers, feeds, self._key)
        return list(fetches)

    def __call__(self, *args, **kwargs) -> list[np.ndarray] | np.ndarray:
        outs = [np.asarray(o) for o in self.run(*args, **kwargs)]
        return outs[0] if len(outs) == 1 else outs


def _is_trainable(graph: Graph, name: str) -> bool:
    return next(p.trainable for p in graph.params if p.name == name)
