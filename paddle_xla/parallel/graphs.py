"""Reading a Graph as data flow: which values an op reads, which values are free of weights, and
which top-level ops form a layer. Paddle-free; shared by placement, pipelines and recomputation."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence

from ..graph import Graph, Op, op_reads


class DataFlow:
    """Producers and readers of the values of a Graph's top-level block."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.ops: tuple[Op, ...] = graph.block.ops
        self.param_of = {p.value: p.name for p in graph.params}
        self.feed_of = {f.value: f.name for f in graph.feeds}
        self.reads = [op_reads(op) for op in self.ops]
        self.producer: dict[int, int] = {v: i for i, op in enumerate(self.ops) for v in op.outputs}
        self.readers: dict[int, list[int]] = defaultdict(list)
        for i, reads in enumerate(self.reads):
            for v in reads:
                self.readers[v].append(i)
        self.weighted = self._weighted()

    def params_read(self, i: int) -> set[str]:
        return {self.param_of[v] for v in self.reads[i] if v in self.param_of}

    def producers(self, i: int) -> set[int]:
        return {self.producer[v] for v in self.reads[i] if v in self.producer}

    def _weighted(self) -> list[bool]:
        """True for ops whose result depends on a weight or buffer (directly or through inputs).

        NOTE: the other ops compute from feeds and constants only (masks, position ids, shapes);
        a pipeline stage recomputes those it needs rather than receive them from another stage."""
        out: list[bool] = []
        for i in range(len(self.ops)):
            out.append(bool(self.params_read(i)) or any(out[p] for p in self.producers(i)))
        return out

    def needed_free_ops(self, ops: Iterable[int]) -> set[int]:
        """The weight-free ops that the given ops need, transitively."""
        need: set[int] = set()
        todo = [p for i in ops for p in self.producers(i)]
        while todo:
            p = todo.pop()
            if p in need or self.weighted[p]:
                continue
            need.add(p)
            todo.extend(self.producers(p))
        return need


# ---- layers, for per-layer recomputation ----------------------------------------------------
_INDEX = re.compile(r"^(?P<base>.*?)(_\d+)?$")


def _parts(scope: str) -> list[str]:
    return [p for p in scope.split("/") if p]


def repeated_layers(scopes: Sequence[str]) -> set[str]:
    """Scope prefixes of layers that come in several numbered instances under one parent
    (TransformerEncoderLayer, TransformerEncoderLayer_1, ...): the "layers" of a model."""
    siblings: dict[tuple[str, str], set[str]] = defaultdict(set)
    for scope in scopes:
        parts = _parts(scope)
        for d, part in enumerate(parts):
            parent = "/".join(parts[:d])
            siblings[(parent, _INDEX.match(part)["base"])].add(part)  # type: ignore[index]  # NOTE: matches any string
    return {
        f"{parent}/{name}" if parent else name
        for (parent, _), names in siblings.items()
        if len(names) > 1
        for name in names
    }


def layer_key(scope: str, layers: set[str]) -> str:
    """The outermost repeated layer an op belongs to ('' when none)."""
    parts = _parts(scope)
    for d in range(1, len(parts) + 1):
        prefix = "/".join(parts[:d])
        if prefix in layers:
            return prefix
    return ""


def layer_runs(ops: Sequence[Op]) -> list[tuple[str, list[int]]]:
    """Consecutive ops grouped by the repeated layer they belong to, in program order."""
    layers = repeated_layers([op.scope for op in ops])
    runs: list[tuple[str, list[int]]] = []
    for i, op in enumerate(ops):
        key = layer_key(op.scope, layers)
        if runs and runs[-1][0] == key:
            runs[-1][1].append(i)
        else:
            runs.append((key, [i]))
    return runs
