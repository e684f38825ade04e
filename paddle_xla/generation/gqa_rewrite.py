"""Grouped-query attention without the repeated keys and values.

A PaddleFormers model with fewer key/value heads than query heads (Llama, Qwen2 and ERNIE 4.5 with GQA)
repeats each key/value head for its group before attending: unsqueeze(axis 2), expand to
[B, KV, G, S, D], reshape to [B, KV * G, S, D], then `q @ k^T` (through a transpose, or transpose_y)
and `p @ v`. XLA materialises the repeated copy, and in a decode step over a fixed cache that copy is
the biggest thing the step writes (G times the cache read, per layer). This rewrite points those two
matmuls at the keys and values before the repetition (paddle_xla.grouped_scores / grouped_values,
ops/grouped_attention.py), which compute the same products. The repeat ops lose their readers and XLA
drops them. A matmul that reads anything else is left alone, so a model without GQA, or one that
repeats its heads another way, runs as captured.

The keys and values a decode step (or a prefill chunk) attends to are the cache with the step's new ones
appended (concat([cache, new], axis=-2), in the model's cache class). The products read those parts
where they lie, so the concatenation loses its attention readers and the step no longer copies the
whole cache into it; a model without GQA gets the same (one group member per head).

The softmax between the two products becomes paddle_xla.slot_softmax, whose sum over the slots, like the
values product's, runs block by block in a fixed order (ops/grouped_attention.py): a row's numbers then do
not depend on how many empty cache slots its program carries. Paddle-free.
"""

from __future__ import annotations

import dataclasses

from ..graph import Graph, Op
from ..graph.patterns import SWAP_LAST_TWO, slot_parts, unrepeated_heads


def rewrite(graph: Graph) -> Graph:
    """The graph with its GQA attention matmuls reading the unrepeated keys and values."""
    producer = {v: op for op in graph.block.ops for v in op.outputs}
    ops = [_grouped(op, producer) or op for op in graph.block.ops]
    ops = _slot_softmaxes(ops)
    if all(a is b for a, b in zip(ops, graph.block.ops)):
        return graph
    return dataclasses.replace(graph, block=dataclasses.replace(graph.block, ops=tuple(ops)))


def _slot_softmaxes(ops: list[Op]) -> list[Op]:
    """ops with each last-axis softmax whose weights (directly or through casts) a grouped_values op reads
    turned into paddle_xla.slot_softmax over that op's value parts."""
    producer = {v: op for op in ops for v in op.outputs}
    parts_of: dict[int, tuple] = {}
    for op in ops:
        if op.name != "paddle_xla.grouped_values":
            continue
        weights = producer.get(op.inputs[0])
        while weights is not None and weights.name == "pd_op.cast":
            weights = producer.get(weights.inputs[0])
        if weights is not None and weights.name == "pd_op.softmax" and weights.attrs.get("axis", -1) in (-1, 3):
            parts_of[id(weights)] = op.inputs[1:]
    return [
        dataclasses.replace(op, name="paddle_xla.slot_softmax", inputs=op.inputs[:1] + parts_of[id(op)], attrs={})
        if id(op) in parts_of
        else op
        for op in ops
    ]


def _grouped(op: Op, producer) -> Op | None:
    if op.name != "pd_op.matmul" or op.attrs.get("transpose_x"):
        return None
    x, y = op.inputs[:2]
    if op.attrs.get("transpose_y"):
        return _as(op, "paddle_xla.grouped_scores", x, _shared(y, producer))
    swap = producer.get(y)
    if swap is not None and swap.name == "pd_op.transpose" and list(swap.attrs.get("perm", ())) == SWAP_LAST_TWO:
        keys = _shared(swap.inputs[0], producer)
        if keys is not None:
            return _as(op, "paddle_xla.grouped_scores", x, keys)
    return _as(op, "paddle_xla.grouped_values", x, _shared(y, producer))


def _shared(value: int, producer) -> tuple[int, ...] | None:
    """The keys or values a matmul operand holds, unrepeated and in their slot parts; None when the operand
    is neither repeated heads nor a concatenation along the slots (then the matmul stays as it is)."""
    kv = unrepeated_heads(value, producer)
    parts = slot_parts(value if kv is None else kv, producer)
    if kv is None and len(parts) == 1:
        return None
    return parts


def _as(op: Op, name: str, x: int, kv: tuple[int, ...] | None) -> Op | None:
    return None if kv is None else dataclasses.replace(op, name=name, inputs=(x,) + kv, attrs={})
