"""A piece of a Graph that runs on its own: the whole program, or one pipeline stage. Runs under any
lowering policy (lower.interpreter_factory) and, on request, rematerialises each layer
(`jax.checkpoint` per repeated layer, e.g. per TransformerEncoderLayer). Paddle-free."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax

from ..graph import Block, Graph, Op, op_reads
from ..lowering.lower import InterpreterFactory, bind, interpreter_factory
from ..ops.util import is_static
from .graphs import layer_runs


@dataclass(frozen=True)
class SubProgram:
    ops: tuple[Op, ...]
    inputs: tuple[int, ...] = ()  # values received from the previous stage
    outputs: tuple[int, ...] = ()  # values returned (to the next stage, or fetches)
    weights: tuple[str, ...] = ()  # params and buffers it reads
    buffer_updates: tuple[tuple[str, int], ...] = ()
    statics: Mapping[int, Any] = field(default_factory=dict)  # trace-time constants it reads


def whole(graph: Graph) -> SubProgram:
    return SubProgram(
        ops=graph.block.ops,
        outputs=tuple(f.value for f in graph.fetches),
        weights=tuple(p.name for p in graph.params),
        buffer_updates=graph.buffer_updates,
    )


def _static(value) -> bool:
    return all(is_static(x) for x in jax.tree.leaves(value))


def run(
    graph: Graph,
    sub: SubProgram,
    weights: Mapping,
    feeds: Mapping,
    received: Sequence,
    key,
    *,
    interpreter: InterpreterFactory | None = None,
    remat_layers: bool = False,
):
    """(outputs in sub.outputs order, {buffer name: new value})."""
    interpreter = interpreter or interpreter_factory(graph)
    env = bind(graph, weights, feeds, partial=True)
    env.update(sub.statics)
    env.update(zip(sub.inputs, received))
    if remat_layers:
        _run_by_layer(sub, env, key, interpreter)
    else:
        interpreter(key).run_block(Block((), sub.ops), env)
    return [env[v] for v in sub.outputs], {n: env[v] for n, v in sub.buffer_updates}


def _run_by_layer(sub: SubProgram, env: dict, key, interpreter) -> None:
    runs = layer_runs(sub.ops)
    keep = set(sub.outputs) | {v for _, v in sub.buffer_updates}
    later: list[set[int]] = []
    acc = set(keep)
    for _, idx in reversed(runs):
        later.append(set(acc))
        for i in idx:
            acc |= op_reads(sub.ops[i])
    later.reverse()
    for (name, idx), live in zip(runs, later):
        ops = tuple(sub.ops[i] for i in idx)
        if not name:
            interpreter(key).run_block(Block((), ops), env)
            continue
        env.update(_checkpointed(ops, env, live, key, interpreter))


def _checkpointed(ops: tuple[Op, ...], env: dict, live: set[int], key, interpreter) -> dict:
    """Run one layer under jax.checkpoint: only its inputs are saved for the backward pass."""
    defined = {v for op in ops for v in op.outputs}
    reads = set().union(*(op_reads(op) for op in ops)) - defined
    consts = {v: env[v] for v in reads if _static(env[v])}
    dyn = sorted(v for v in reads if v not in consts)
    outs = sorted(v for v in defined if v in live)
    found: dict[int, Any] = {}

    def layer(values, k):
        local = {**consts, **dict(zip(dyn, values))}
        interpreter(k).run_block(Block((), ops), local)
        found.update({v: local[v] for v in outs if _static(local[v])})
        return {v: local[v] for v in outs if v not in found}

    # NOTE: prevent_cse stays on: with gradient accumulation the forward and the backward pass share
    # one loop body, where XLA would otherwise merge the recomputation back into the forward.
    result = jax.checkpoint(layer)([env[v] for v in dyn], key)
    return {**result, **found}
