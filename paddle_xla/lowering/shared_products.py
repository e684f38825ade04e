"""Several Graphs of one model as one function whose linear layers each run one product for all of them.

A server's decode step (every row, one token each) and a prompt's prefill chunk (one row, many tokens)
read the same weights. Run as two programs, each linear layer reads its weight twice and multiplies two
thin products; run here, the Graphs are interpreted in lockstep and a matmul that both reach with the
same weight multiplies their rows stacked ([M1 + M2, K] @ W), then hands each its own rows back. Every
other op runs in its own Graph as lowered alone. So the result is each Graph's own, provided the
product gives a row the same numbers whatever rows share it: a matmul is stacked only when its weight is
held as [N, K] (layouts.matmul_nk), where XLA:CPU's float32 GEMM does (measured: each row of M = 2..160
equals the same row at M = 32 bit for bit; only M = 1, a matrix-vector product, differs). A weight held
otherwise (int8, half, [K, N] with M >= 64 differs) keeps one product per Graph. Paddle-free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from ..errors import UnsupportedOpsError
from ..graph import Graph, Op
from .half import restore
from .interpreter import Interpreter, _read, bind, check_graph
from .lower import interpreter_factory
from .policy import LoweringPolicy

_DONE = object()


def lower_together(graphs: Sequence[Graph], policy: LoweringPolicy) -> Callable:
    """f([(params, buffers, feeds) per Graph]) -> [fetches per Graph], the Graphs run in lockstep (module
    docstring). Inference only: the Graphs' buffer updates are not returned."""
    for graph in graphs:
        report = check_graph(graph)
        if not report.ok:
            raise UnsupportedOpsError(report)
    makes = [interpreter_factory(g, policy) for g in graphs]
    names = [{p.value: p.name for p in g.params} for g in graphs]
    out = (lambda x, dtype: restore(x, dtype)) if policy.precision != "fp32" else (lambda x, dtype: x)

    def fn(inputs: Sequence[tuple[Mapping, Mapping, Mapping]]) -> list[tuple]:
        envs = [bind(g, {**buffers, **params}, feeds) for g, (params, buffers, feeds) in zip(graphs, inputs)]
        interps = [make(jax.random.key(0)) for make in makes]
        _run(graphs, interps, envs, names)
        return [tuple(out(env[f.value], f.dtype) for f in g.fetches) for g, env in zip(graphs, envs)]

    return fn


def _run(graphs, interps: list[Interpreter], envs: list[dict], names: list[dict]) -> None:
    walks = [_walk(g, i, e, n) for g, i, e, n in zip(graphs, interps, envs, names)]
    asks = [_advance(w, None) for w in walks]
    while any(a is not _DONE for a in asks):
        live = [i for i, a in enumerate(asks) if a is not _DONE]
        if len(live) > 1 and _stackable([asks[i] for i in live], [names[i] for i in live]):
            results = _stacked([asks[i] for i in live], interps[live[0]], envs[live[0]])
            for i, r in zip(live, results):
                asks[i] = _advance(walks[i], r)
        else:
            # NOTE: the Graphs reach different weights here: the first goes on alone until they meet again
            i = live[0]
            op, args = asks[i]
            asks[i] = _advance(walks[i], interps[i].apply(op, args, envs[i]))


def _walk(graph: Graph, interp: Interpreter, env: dict, names: Mapping[int, str]):
    """Interpret the Graph's top-level ops, yielding (op, args) at each matmul whose product may be
    stacked and taking its results back."""
    interp.depth = 1
    for op in graph.block.ops:
        args = [_read(env, i, op) for i in op.inputs]
        if _may_stack(op, interp, names):
            results = yield op, args
        else:
            results = interp.apply(op, args, env)
        for vid, val in zip(op.outputs, results):
            env[vid] = val
    if interp.layout is not None:
        interp.layout.release(env)


def _advance(walk, value):
    try:
        return walk.send(value)
    except StopIteration:
        return _DONE


def _may_stack(op: Op, interp: Interpreter, names: Mapping[int, str]) -> bool:
    return (
        op.name == "pd_op.matmul"
        and not op.attrs.get("transpose_x")
        and op.inputs[1] in names
        and op.inputs[1] in interp.kernels.nk_weights
    )


def _stackable(asks, names) -> bool:
    """Whether these matmuls multiply the same weight, the same way, operands of one dtype and width."""
    (op0, args0), n0 = asks[0], names[0]
    return all(
        n[op.inputs[1]] == n0[op0.inputs[1]]
        and op.attrs == op0.attrs
        and args[0].dtype == args0[0].dtype
        and args[0].shape[-1] == args0[0].shape[-1]
        for (op, args), n in zip(asks, names)
    )


def _stacked(asks, interp: Interpreter, env: dict) -> list[tuple[Any, ...]]:
    """One product for the asks' rows stacked, split back into each ask's own shape."""
    xs = [args[0] for _, args in asks]
    rows = [x.reshape(-1, x.shape[-1]) for x in xs]
    op, args = asks[0]
    (product,) = interp.apply(op, [jnp.concatenate(rows, axis=0)] + list(args[1:]), env)[:1]
    out, at = [], 0
    for x, r in zip(xs, rows):
        out.append((product[at : at + r.shape[0]].reshape(x.shape[:-1] + product.shape[-1:]),))
        at += r.shape[0]
    return out
