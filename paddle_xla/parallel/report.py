"""Costs for balancing stages, and the plan printed before compiling: stage -> layers, FLOPs, bytes.

Shapes are not known until the first batch, so costs are measured on a stand-in micro-batch (each
unknown dimension set to `PLACEHOLDER`); only their ratios matter for balancing."""

from __future__ import annotations

from collections.abc import Mapping

import jax
import numpy as np

from ..graph import Graph
from ..lowering.lower import interpreter_factory
from ..lowering.policy import LoweringPolicy
from .graphs import DataFlow
from .placement import Placement
from .profile import ValueInfo, op_flops, trace_values

PLACEHOLDER = 8


def stand_in_values(graph: Graph, precision: str = "fp32") -> dict[int, ValueInfo] | None:
    """Abstract values for a stand-in micro-batch; None when the program needs other shapes."""
    feeds = {
        f.name: jax.ShapeDtypeStruct(tuple(PLACEHOLDER if d < 0 else d for d in f.shape), f.dtype) for f in graph.feeds
    }
    weights = {p.name: jax.ShapeDtypeStruct(tuple(p.shape), p.dtype) for p in graph.params}
    try:
        return trace_values(graph, weights, feeds, interpreter_factory(graph, LoweringPolicy.live(precision)))
    except Exception:  # NOTE: e.g. a reshape to a fixed size; balancing then falls back to weight counts
        return None


def costs(graph: Graph, values: Mapping[int, ValueInfo] | None) -> tuple[list[float], list[float] | None]:
    """Per top-level op: (its share of the FLOPs plus its share of the weights, bytes live across a cut
    right after it)."""
    flow = DataFlow(graph)
    sizes = {p.name: int(np.prod(p.shape)) for p in graph.params}
    flops = np.array([op_flops(op, values) if values else 1.0 for op in flow.ops])
    weights = np.array([sum(sizes[n] for n in flow.params_read(i)) for i in range(len(flow.ops))], float)
    # NOTE: time follows FLOPs, but every device of the mesh holds as many weight bytes as the largest
    # stage (stages are packed to one width), so both shares count equally.
    cost = list(flops / max(flops.sum(), 1.0) + weights / max(weights.sum(), 1.0))
    if values is None:
        return cost, None
    live = np.zeros(len(flow.ops) + 1)
    for v, p in flow.producer.items():
        readers = flow.readers.get(v, [])
        if readers and v in values and not values[v].is_static and flow.weighted[p]:
            live[p] += values[v].nbytes
            live[max(readers)] -= values[v].nbytes
    return cost, list(np.cumsum(live)[:-1])


def describe(graph: Graph, placement: Placement, values: Mapping[int, ValueInfo] | None) -> str:
    flow = DataFlow(graph)
    sizes = {p.name: int(np.prod(p.shape)) * np.dtype(p.dtype).itemsize for p in graph.params}
    lines = [
        f"pipeline plan ({placement.how}, {placement.stages} stages; FLOPs per stand-in micro-batch of {PLACEHOLDER}):"
    ]
    for s in range(placement.stages):
        ops = placement.ops_of(s)
        weights = set().union(*(flow.params_read(i) for i in ops)) if ops else set()
        flops = sum(op_flops(flow.ops[i], values) for i in ops) if values else float("nan")
        layers = _layers([flow.ops[i].scope for i in ops])
        lines.append(
            f"  stage {s}: {len(ops):4d} ops, {flops / 1e6:9.2f} MFLOP, "
            f"{sum(sizes[n] for n in weights) / 2**20:8.2f} MiB weights  {layers}"
        )
    return "\n".join(lines)


def _layers(scopes: list[str]) -> str:
    """First and last layer path of a stage, shortened."""
    named = [s.strip("/") for s in scopes if s.strip("/")]
    if not named:
        return ""
    first, last = named[0], named[-1]
    short = lambda s: "/".join(s.split("/")[-2:])  # noqa: E731
    return short(first) if first == last else f"{short(first)} .. {short(last)}"
