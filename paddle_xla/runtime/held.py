"""HeldWeights: which weights an inference executable reads in another precision or layout than Paddle's.

An inference program's weights do not change between calls, so whatever its kernels would do to a weight
on every call is done once, when the weights are placed: matmul and conv weights that only white-list ops
read are held in half under bf16/fp16 (BERT-Base bf16: -20 %), conv filters as HWIO on CPU (ResNet-50 b8:
512 -> 451 ms), float32 matmul weights as [N, K] on CPU; under Strategy(quant_type="weight_only_int8") a
generator's matmul weights are held as int8 values and per-channel scales (lowering/int8.py). CompiledModel,
export and the artifact loader all hold weights through this one object, so a deployed artifact runs the
kernels the live model runs. Paddle-free."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..graph import Graph
from ..lowering.half import HALF, half_weight_names
from ..lowering.int8 import int8_weight_names, quantize
from ..lowering.layouts import hwio_filter_names, hwio_shaped, nk_shaped, nk_weight_names
from ..lowering.policy import LoweringPolicy


@dataclass(frozen=True)
class HeldWeights:
    hwio: frozenset = frozenset()  # filters held as HWIO
    half: frozenset = frozenset()  # float32 weights held in `half_dtype`
    half_dtype: Any = None
    int8: frozenset = frozenset()  # matmul weights held as weight-only int8 (in the compute dtype)
    nk: frozenset = frozenset()  # float32 matmul weights held as [N, K]

    @classmethod
    def for_graph(cls, graph: Graph, policy: LoweringPolicy, quant_type: str | None = None) -> HeldWeights:
        half_dtype = HALF.get(policy.precision)
        int8 = frozenset(int8_weight_names(graph) if quant_type == "weight_only_int8" else ())
        return cls(
            hwio=frozenset(hwio_filter_names(graph) if policy.hwio_filters else ()),
            half=frozenset(half_weight_names(graph) if half_dtype is not None else ()) - int8,
            half_dtype=half_dtype,
            int8=int8,
            nk=frozenset(nk_weight_names(graph) if policy.nk_weights else ()) - int8,
        )

    @classmethod
    def from_manifest(cls, entry: Mapping, precision: str) -> HeldWeights:
        """From an artifact's `exported.<platform>` entry. Format version 1 lists no half weights, and
        lists HWIO filters only from its last release on (before that: nothing held)."""
        return cls(
            hwio=frozenset(entry.get("hwio_filters", ())),
            half=frozenset(entry.get("half_weights", ())),
            half_dtype=HALF.get(precision),
            int8=frozenset(entry.get("int8_weights", ())),
            nk=frozenset(entry.get("nk_weights", ())),
        )

    def to_manifest(self) -> dict:
        out = {"hwio_filters": sorted(self.hwio), "half_weights": sorted(self.half)}
        out = {**out, "int8_weights": sorted(self.int8)} if self.int8 else out
        return {**out, "nk_weights": sorted(self.nk)} if self.nk else out

    def prepared(self, name: str, value):
        """`value` (Paddle's layout and dtype: a NumPy or device array) as the executable reads it."""
        xp = jnp if isinstance(value, jax.Array) else np  # NOTE: device values stay on the device
        if name in self.int8:
            return quantize(value, self.half_dtype or np.float32)
        if name in self.half:
            value = xp.asarray(value).astype(self.half_dtype)
        if name in self.hwio:
            value = hwio_shaped(value)
        if name in self.nk:
            value = nk_shaped(value)
        return value

    def all_prepared(self, weights: Mapping[str, Any]) -> dict[str, Any]:
        return {k: self.prepared(k, v) for k, v in weights.items()}
