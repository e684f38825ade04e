"""A placement turned into runnable stages for one micro-batch shape: each stage's ops (its own plus
the weight-free ops it recomputes), the values it receives and sends, the weights it owns, and the
packed layout of what crosses each stage boundary. Paddle-free."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import jax

from ..graph import Graph
from .graphs import DataFlow
from .pack import Packing, widths
from .placement import Placement
from .profile import ValueInfo
from .program import SubProgram


@dataclass(frozen=True)
class Ownership:
    """Which stage keeps each weight. Shape-independent: fixed once the placement is."""

    trainable: tuple[tuple[str, ...], ...]  # per stage: trainable weights read only there
    buffers: tuple[tuple[str, ...], ...]  # per stage: buffers (running statistics)
    shared: tuple[str, ...]  # trainable weights read on several stages (tied embeddings)


def ownership(graph: Graph, placement: Placement) -> Ownership:
    flow = DataFlow(graph)
    readers: dict[str, set[int]] = {p.name: set() for p in graph.params}
    for i, s in enumerate(placement.stage_of):
        if s is not None:
            for name in flow.params_read(i):
                readers[name].add(s)
    S = placement.stages
    trainable: list[list[str]] = [[] for _ in range(S)]
    buffers: list[list[str]] = [[] for _ in range(S)]
    shared = []
    for p in graph.params:
        where = readers[p.name] or {0}  # NOTE: an unread weight stays with stage 0, as Paddle keeps it
        if not p.trainable:
            buffers[min(where)].append(p.name)
        elif len(where) > 1:
            shared.append(p.name)
        else:
            trainable[next(iter(where))].append(p.name)
    return Ownership(tuple(map(tuple, trainable)), tuple(map(tuple, buffers)), tuple(shared))


@dataclass(frozen=True)
class Stages:
    subs: tuple[SubProgram, ...]
    sends: tuple[Packing, ...]  # boundary k -> k+1
    box: Mapping[str, int]  # per dtype, the packed width of the largest boundary
    send_bytes: tuple[int, ...]  # per boundary, per micro-batch


def build(graph: Graph, placement: Placement, values: Mapping[int, ValueInfo]) -> Stages:
    flow = DataFlow(graph)
    S = placement.stages
    fetches = [f.value for f in graph.fetches]
    own = [set(placement.ops_of(s)) for s in range(S)]
    fetch_ops = {flow.producer[v] for v in fetches if v in flow.producer and not flow.weighted[flow.producer[v]]}
    ops = []
    for s in range(S):
        extra = fetch_ops if s == S - 1 else set()
        ops.append(sorted(own[s] | extra | flow.needed_free_ops(own[s] | extra)))
    reads = [set().union(*(flow.reads[i] for i in ops[s])) | (set(fetches) if s == S - 1 else set()) for s in range(S)]
    produced = [{v for i in own[s] for v in flow.ops[i].outputs} for s in range(S)]
    carried = []
    for k in range(S - 1):
        made = set().union(*produced[: k + 1])
        need = set().union(*reads[k + 1 :])
        carried.append(tuple(sorted(v for v in made & need if not values[v].is_static)))
    subs = []
    for s in range(S):
        defined = {v for i in ops[s] for v in flow.ops[i].outputs}
        statics = {v: values[v].static for v in reads[s] - defined if v in values and values[v].is_static}
        weights = sorted(set().union(*(flow.params_read(i) for i in ops[s])))
        updates = tuple((n, v) for n, v in graph.buffer_updates if v in produced[s])
        subs.append(
            SubProgram(
                ops=tuple(flow.ops[i] for i in ops[s]),
                inputs=carried[s - 1] if s else (),
                outputs=carried[s] if s < S - 1 else tuple(fetches),
                weights=tuple(weights),
                buffer_updates=updates,
                statics=statics,
            )
        )
    sends = tuple(Packing.of([_template(values[v]) for v in vids]) for vids in carried)
    return Stages(tuple(subs), sends, widths(sends), tuple(sum(values[v].nbytes for v in vids) for vids in carried))


def _template(info: ValueInfo):
    return jax.tree.unflatten(info.tree, list(info.leaves))
