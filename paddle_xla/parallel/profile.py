"""What each top-level value of a Graph looks like for one input shape, found by tracing it
abstractly (jax.eval_shape): shape and dtype, or the value itself when it is known at trace time
(shape arithmetic stays NumPy). Also a per-op cost model for balancing pipeline stages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ..graph import Graph, Op
from ..lowering.lower import InterpreterFactory, bind, interpreter_factory
from ..ops.util import is_static


@dataclass(frozen=True)
class ValueInfo:
    tree: Any  # jax.tree structure of the value (an array, or a list of arrays)
    leaves: tuple  # ShapeDtypeStruct per leaf
    static: Any = None  # the value itself when known at trace time (then leaves is empty)

    @property
    def is_static(self) -> bool:
        return self.static is not None

    @property
    def nbytes(self) -> int:
        return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in self.leaves)


def _info(value) -> ValueInfo:
    leaves, tree = jax.tree.flatten(value)
    if all(is_static(x) for x in leaves):
        return ValueInfo(tree, (), value)
    return ValueInfo(tree, tuple(jax.ShapeDtypeStruct(np.shape(x), x.dtype) for x in leaves))


def trace_values(
    graph: Graph, weights: Mapping[str, Any], feeds: Mapping[str, Any], interpreter: InterpreterFactory | None = None
) -> dict[int, ValueInfo]:
    """ValueInfo for every feed, weight and top-level op result, for these (abstract) inputs."""
    out: dict[int, ValueInfo] = {}
    interpreter = interpreter or interpreter_factory(graph)

    def run(weights, feeds, key):
        env = bind(graph, weights, feeds)
        interp = interpreter(key)
        for op in graph.block.ops:
            results = interp.apply(op, [env[i] if i is not None else None for i in op.inputs], env)
            for vid, val in zip(op.outputs, results):
                env[vid] = val
        for vid, val in env.items():
            out[vid] = _info(val)
        return 0

    spec = lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype)  # noqa: E731
    jax.eval_shape(run, jax.tree.map(spec, dict(weights)), jax.tree.map(spec, dict(feeds)), jax.random.key(0))
    return out


# ---- cost model ----------------------------------------------------------------------------------
def _size(info: ValueInfo | None) -> int:
    if info is None or info.is_static:
        return 0
    return sum(int(np.prod(x.shape)) for x in info.leaves)


def _shape(info: ValueInfo | None) -> tuple:
    return tuple(info.leaves[0].shape) if info is not None and info.leaves else ()


def op_flops(op: Op, values: Mapping[int, ValueInfo]) -> float:
    """Forward FLOPs of one op: 2*M*N*K for matmuls, 2*out*(Cin/groups*kh*kw) for convolutions,
    one per output element for the rest (a rough figure; it only has to rank stages)."""
    out = sum(_size(values.get(v)) for v in op.outputs)
    ins = [values.get(v) if v is not None else None for v in op.inputs]
    if op.name == "pd_op.matmul" and len(ins) >= 2:
        x = _shape(ins[0])
        k = (x[-2] if op.attrs.get("transpose_x") else x[-1]) if x else 1
        return 2.0 * out * k
    if op.name == "paddle_xla.sparse_moe" and _shape(ins[0]) and _shape(ins[-1]):
        x, down = _shape(ins[0]), _shape(ins[-1])
        tokens, hidden, inner = float(np.prod(x[:-1])), x[-1], down[0]
        # NOTE: the router over every expert, then each token's top_k experts' SwiGLU MLPs (gate and up
        # H x I each, down I x H: 6 H I per token and expert), not every expert's
        return 2.0 * tokens * hidden * op.attrs["num_experts"] + 6.0 * tokens * op.attrs["top_k"] * hidden * inner
    if "conv" in op.name and len(ins) >= 2:
        w = _shape(ins[1])
        return 2.0 * out * float(np.prod(w[1:])) if w else float(out)
    if op.blocks:
        return float(out) * 4
    return float(out)
