"""Graph -> one pure JAX function  f(params, buffers, feeds, key) -> (fetches, new_buffers).

The Graph is interpreted op by op while jax traces it, so the traced program is exactly the
Paddle program, and XLA sees one function to fuse and schedule. Every choice that is not the
program's own (precision, the target's kernel forms, layouts) comes from one LoweringPolicy, and
this is the one place that turns a policy into an interpreter. Paddle-free.

JAX must keep 64-bit dtypes while the function is traced and run (x64.scope()); the public entry
points (runtime, training, export, artifacts) do that."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import jax

from ..errors import UnsupportedOpsError
from ..graph import Graph, Op
from .channels_last import can_hold_channels_last, conv_filters
from .half import restore
from .interpreter import CoverageReport, GraphPlan, Interpreter, Problem, bind, check_graph, resolve  # noqa: F401
from .layouts import hwio_filter_names, nk_weight_names
from .policy import LoweringPolicy

# (key) -> Interpreter: what runs a Graph's blocks under one policy (parallel/program.py takes one)
InterpreterFactory = Callable[[Any], Interpreter]


def plan(graph: Graph, policy: LoweringPolicy) -> GraphPlan:
    """Which of `graph`'s values `policy`'s layouts apply to."""
    # NOTE: channels-last needs a Graph without sub-blocks: a loop carry must keep its declared layout.
    nhwc = conv_filters(graph) if policy.channels_last and can_hold_channels_last(graph) else None
    hwio = hwio_filter_names(graph) if policy.hwio_filters else set()
    nk = nk_weight_names(graph) if policy.nk_weights else set()
    return GraphPlan(
        nhwc_filters=nhwc,
        hwio_filters=frozenset(p.value for p in graph.params if p.name in hwio),
        nk_weights=frozenset(p.value for p in graph.params if p.name in nk),
    )


def interpreter_factory(
    graph: Graph, policy: LoweringPolicy = LoweringPolicy(), collect_checks: bool = False
) -> InterpreterFactory:
    """What runs `graph`'s blocks under `policy`, given a key."""
    return partial(Interpreter, policy=policy, plan=plan(graph, policy), collect_checks=collect_checks)


def checked_ops(graph: Graph) -> list[Op]:
    """The top-level asserts, whose flags lower(..., checks=True) appends to the fetches, in this order."""
    return [op for op in graph.block.ops if op.name == "pd_op.assert"]


def lower(graph: Graph, policy: LoweringPolicy = LoweringPolicy(), checks: bool = False) -> Callable:
    """The Graph as a pure function f(params, buffers, feeds, key) -> (fetches, new_buffers), under `policy`.

    params/buffers/feeds are dicts name -> array; fetches is a tuple in graph.fetches order, followed
    with `checks` by one bool per top-level assert (checked_ops: True where it held);
    new_buffers holds the buffers the program writes (BatchNorm running statistics in train mode).
    Under a half-precision policy, float outputs come back in the dtypes the program declares."""
    report = check_graph(graph)
    if not report.ok:
        raise UnsupportedOpsError(report)
    make = interpreter_factory(graph, policy, collect_checks=checks)
    declared = {p.name: p.dtype for p in graph.params}
    out = (lambda x, dtype: restore(x, dtype)) if policy.precision != "fp32" else (lambda x, dtype: x)

    def fn(params: Mapping, buffers: Mapping, feeds: Mapping, key=None):
        env = bind(graph, {**buffers, **params}, feeds)
        interp = make(jax.random.key(0) if key is None else key)
        interp.run_block(graph.block, env)
        fetches = tuple(out(env[f.value], f.dtype) for f in graph.fetches)
        if checks:
            fetches += tuple(cond for _, cond in interp.checks)
        new_buffers = {name: out(env[vid], declared[name]) for name, vid in graph.buffer_updates}
        return fetches, new_buffers

    return fn
