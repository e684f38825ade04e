"""Compiled programs: weights on the device, feeds checked, one executable per input shape."""
from __future__ import annotations

import time
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from . import feeds as feeds_mod
from .cache import compile_progress
from .graph import Graph
from .lower import lower
from .ops.util import on_xla_cpu
from .channels_last import can_hold_channels_last
from .layouts import OIHW_TO_HWIO, hwio_filter_names, with_hwio_filters
from .train.precision import HALF, half_weight_names, interpreter_for, lower_mixed
from .xla_options import inference_options


class CompiledModel:
    """A Graph with its weights, ready to run: `model(*inputs) -> outputs` (NumPy in, NumPy out).

    Shapes are static per compile: each new input shape compiles once and is cached."""

    def __init__(self, graph: Graph, weights: Mapping[str, np.ndarray], seed: int = 0, key=None, strategy=None):
        self.graph = graph
        self.source_weights = weights          # as Paddle laid them out (export writes these)
        # NOTE: inference honours Strategy.precision only: half compute, float32 weights and outputs.
        precision = strategy.precision if strategy is not None else "fp32"
        interp = interpreter_for(precision)
        # NOTE: weights the executable reads in another precision or layout than Paddle's, prepared once
        # here, not on every call: matmul weights in half (BERT-Base bf16: -20 %), conv filters as HWIO
        # on CPU (ResNet-50 b8: 512 -> 451 ms). set_weights applies the same to new values.
        self._half_dtype = HALF.get(precision)
        self._half = half_weight_names(graph) if self._half_dtype is not None else set()
        self._hwio = hwio_filter_names(graph) if on_xla_cpu() else set()
        if self._hwio:
            interp = with_hwio_filters(interp, frozenset(p.value for p in graph.params if p.name in self._hwio),
                                       channels_last=can_hold_channels_last(graph))
        self._fn = lower(graph, interp) if precision == "fp32" else lower_mixed(graph, precision, interp)
        params = {p.name: self._prepared(p.name, weights[p.name]) for p in graph.params}
        self.params = jax.device_put({k: v for k, v in params.items() if _is_trainable(graph, k)})
        self.buffers = jax.device_put({k: v for k, v in params.items() if not _is_trainable(graph, k)})
        self._key = key if key is not None else jax.random.key(seed)
        self._jitted = jax.jit(self._fn)
        self._compiled: dict[tuple, Any] = {}
        self.compile_seconds: dict[tuple, float] = {}

    def _prepared(self, name: str, value):
        xp = jnp if isinstance(value, jax.Array) else np       # NOTE: device values stay on the device
        if name in self._half:
            value = xp.asarray(value).astype(self._half_dtype)
        if name in self._hwio:
            value = xp.transpose(value, OIHW_TO_HWIO)
        return value

    def set_weights(self, values: Mapping[str, Any]) -> None:
        """Replace weights by name, given as Paddle lays them out (e.g. a train step's current ones)."""
        mine = {k: v for k, v in values.items() if k in self.params or k in self.buffers}
        self.source_weights = {**self.source_weights, **mine}
        prepared = jax.device_put({k: self._prepared(k, v) for k, v in mine.items()})
        self.params = {**self.params, **{k: v for k, v in prepared.items() if k in self.params}}
        self.buffers = {**self.buffers, **{k: v for k, v in prepared.items() if k in self.buffers}}

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

    def jaxpr(self, *args, **kwargs):
        """The program XLA compiles for these inputs, as a closed jaxpr (with the weights as prepared:
        half, HWIO), e.g. to count its FLOPs."""
        return jax.make_jaxpr(self._fn)(self.params, self.buffers, self.feeds(args, kwargs), self._key)

    def __call__(self, *args, **kwargs) -> list[np.ndarray] | np.ndarray:
        outs = [np.asarray(o) for o in self.run(*args, **kwargs)]
        return outs[0] if len(outs) == 1 else outs


def _is_trainable(graph: Graph, name: str) -> bool:
    return next(p.trainable for p in graph.params if p.name == name)
