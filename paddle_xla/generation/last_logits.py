"""The LM head on the last position only.

A prefill (or a prefill chunk) needs the logits of the prompt's last position alone, and the capture says
so as PaddleFormers' generate does: `logits[:, -1]` after the head. XLA does not move that slice before the
dot, so the head multiplied every position ([c, hidden] x [hidden, vocab]: at a 64-token chunk of the 100M
Llama, a quarter of the chunk's FLOPs, for 63 rows thrown away). This rewrite slices the head's input
instead: slice(matmul(h, W), axis 1) -> matmul(slice(h, axis 1), W), the same rows of the same product.
Only a fetched slice that drops axis 1 of a [B, T, V] product of an untransposed left operand and a 2-D
weight, the product having no other reader, is moved.
Paddle-free."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter

from ..graph import Graph, Op


def rewrite(graph: Graph) -> Graph:
    """The graph with each slice of a matmul's rows moved before the matmul."""
    ops = list(graph.block.ops)
    readers = graph.read_counts()
    producer = {v: i for i, op in enumerate(ops) for v in op.outputs}
    ranks = {f.value: len(f.shape) for f in graph.fetches}
    weights = {p.value: len(p.shape) for p in graph.params}
    heads = {
        i: j
        for i, op in enumerate(ops)  # slice position -> its matmul's
        if (j := _head(op, ops, producer, readers, ranks, weights)) is not None
    }
    if not heads:
        return graph
    fresh = itertools.count(max(graph.value_ids()) + 1)
    out = []
    for i, op in enumerate(ops):
        if i in heads:  # NOTE: the slice, then its matmul, where the slice was
            matmul, rows = ops[heads[i]], next(fresh)
            out.append(dataclasses.replace(op, inputs=(matmul.inputs[0],) + op.inputs[1:], outputs=(rows,)))
            out.append(dataclasses.replace(matmul, inputs=(rows,) + matmul.inputs[1:], outputs=op.outputs))
        elif i not in heads.values():
            out.append(op)
    return dataclasses.replace(graph, block=dataclasses.replace(graph.block, ops=tuple(out)))


def _head(op: Op, ops: list[Op], producer: dict, readers: Counter, ranks: dict, weights: dict) -> int | None:
    """The position of the matmul whose rows `op` slices, when it can be moved; else None."""
    if not takes_one_position(op):
        return None
    j = producer.get(op.inputs[0])
    if j is None or readers[op.inputs[0]] != 1:
        return None
    matmul = ops[j]
    if matmul.name != "pd_op.matmul" or matmul.attrs.get("transpose_x"):
        return None
    # NOTE: the product's rank from what the Graph declares: the slice's output is a fetch of rank 2 (axis 1
    # dropped, so the product was 3-D) and the right operand a 2-D weight, so the left operand is [B, T, K]
    # and axis 1 its rows, never contracted
    if ranks.get(op.outputs[0]) != 2 or weights.get(matmul.inputs[1]) != 2:
        return None
    return j


def takes_one_position(op: Op) -> bool:
    """Whether `op` is a slice that keeps one position of axis 1 and drops the axis (`logits[:, -1]`)."""
    return (
        op.name == "pd_op.slice"
        and list(op.attrs.get("axes", ())) == [1]
        and list(op.attrs.get("decrease_axis", ())) == [1]
    )
