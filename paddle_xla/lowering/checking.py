"""A Graph checked the way compiling would check it, without compiling: every op lowered on abstract
values (jax.eval_shape), so a lowering that fails for this program (a bad attribute value, a shape it
does not take, a capture error) is reported before the user compiles, with its layer and source line.

All failures at once: an op that fails poisons its outputs, and ops that read a poisoned value are
skipped (they would fail only because of it); the rest of the program is still checked. Paddle-free."""

from __future__ import annotations

from typing import Any

import jax

from .. import x64
from ..errors import LoweringError
from ..graph import Graph, op_reads
from ..ops.util import dtype as jax_dtype
from .interpreter import Problem, bind, resolve
from .lower import interpreter_factory
from .policy import LoweringPolicy

FREE_DIM = 4  # what an InputSpec's None dimension becomes while checking


def lowering_problems(graph: Graph, precision: str = "fp32", free_dim: int = FREE_DIM) -> list[Problem]:
    """The ops of the top-level block whose lowering fails on abstract inputs (None dims = free_dim)."""
    weights = {p.name: jax.ShapeDtypeStruct(tuple(p.shape), jax_dtype(p.dtype)) for p in graph.params}
    feeds = {
        f.name: jax.ShapeDtypeStruct(tuple(free_dim if d < 0 else d for d in f.shape), jax_dtype(f.dtype))
        for f in graph.feeds
    }
    problems: list[Problem] = []
    make = interpreter_factory(graph, LoweringPolicy.live(precision))

    def run(weights, feeds, key):
        env: dict[int, Any] = bind(graph, weights, feeds)
        interp = make(key)
        poisoned: set[int] = set()
        for op in graph.block.ops:
            entry = resolve(op.name)
            if poisoned & op_reads(op) or entry is None or entry.attr_problems(op.attrs):
                poisoned.update(op.outputs)  # NOTE: check_graph reports the op itself
                continue
            try:
                results = interp.apply(op, [env[v] if v is not None else None for v in op.inputs], env)
            except LoweringError as e:
                problems.append(Problem(op.name, op.scope, op.source, f"does not lower: {_first_line(e)}"))
                poisoned.update(op.outputs)
                continue
            env.update(zip(op.outputs, results))
        return 0

    with x64.scope():
        jax.eval_shape(run, weights, feeds, jax.random.key(0))
    return problems


def _first_line(e: Exception) -> str:
    text = str(e)
    return text.split("\n  at ")[0].splitlines()[0] if text else type(e).__name__
