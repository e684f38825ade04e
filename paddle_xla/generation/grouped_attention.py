"""Grouped-query attention without the repeated keys and values.

A PaddleFormers model with fewer key/value heads than query heads (Llama, Qwen2 and ERNIE 4.5 with GQA)
repeats each key/value head for its group before attending: unsqueeze(axis 2), expand to
[B, KV, G, S, D], reshape to [B, KV * G, S, D], then `q @ k^T` (through a transpose, or transpose_y)
and `p @ v`. XLA materialises the repeated copy, and in a decode step over a fixed cache that copy is
the biggest thing the step writes (G times the cache read, per layer). This rewrite points those two
matmuls at the keys and values before the repetition (paddle_xla.grouped_scores / grouped_values,
ops/grouped_attention.py), which compute the same products. The repeat ops lose their readers and XLA
drops them. A matmul that reads anything else is left alone, so a model without GQA, or one that
repeats its heads another way, runs as captured. Paddle-free.
"""
from __future__ import annotations

import dataclasses

from ..graph import Graph, Op

SWAP_LAST_TWO = [0, 1, 3, 2]


def rewrite(graph: Graph) -> Graph:
    """The graph with its GQA attention matmuls reading the unrepeated keys and values."""
    producer = {v: op for op in graph.block.ops for v in op.outputs}
    ops = [_grouped(op, producer) or op for op in graph.block.ops]
    if all(a is b for a, b in zip(ops, graph.block.ops)):
        return graph
    return dataclasses.replace(graph, block=dataclasses.replace(graph.block, ops=tuple(ops)))


def _grouped(op: Op, producer) -> Op | None:
    if op.name != "pd_op.matmul" or op.attrs.get("transpose_x"):
        return None
    x, y = op.inputs[:2]
    if op.attrs.get("transpose_y"):
        keys = _unrepeated(y, producer)
        return None if keys is None else _as(op, "paddle_xla.grouped_scores", x, keys)
    swap = producer.get(y)
    if swap is not None and swap.name == "pd_op.transpose" and list(swap.attrs.get("perm", ())) == SWAP_LAST_TWO:
        keys = _unrepeated(swap.inputs[0], producer)
        if keys is not None:
            return _as(op, "paddle_xla.grouped_scores", x, keys)
    values = _unrepeated(y, producer)
    return None if values is None else _as(op, "paddle_xla.grouped_values", x, values)


def _as(op: Op, name: str, x: int, kv: int) -> Op:
    return dataclasses.replace(op, name=name, inputs=(x, kv), attrs={})


def _unrepeated(value: int, producer) -> int | None:
    """The [B, KV, S, D] tensor that `value` repeats as reshape(expand(unsqueeze(t, [2]), [B, KV, G, S, D]),
    [B, KV * G, S, D]), or None when it is not that (shapes read from the constant shape operands)."""
    reshape = producer.get(value)
    if reshape is None or reshape.name != "pd_op.reshape":
        return None
    expand = producer.get(reshape.inputs[0])
    if expand is None or expand.name != "pd_op.expand":
        return None
    unsqueeze = producer.get(expand.inputs[0])
    if unsqueeze is None or unsqueeze.name != "pd_op.unsqueeze":
        return None
    axes, big, merged = (_constant(unsqueeze.inputs[1], producer), _constant(expand.inputs[1], producer),
                         _constant(reshape.inputs[1], producer))
    if axes not in ([2], [-3]) or big is None or merged is None or len(big) != 5 or len(merged) != 4:
        return None
    if merged[1] != big[1] * big[2] or merged[2:] != big[3:] or min(big[1:]) < 1:
        return None
    return unsqueeze.inputs[0]


def _constant(value: int, producer) -> list[int] | None:
    op = producer.get(value)
    if op is None or op.name != "pd_op.full_int_array":
        return None
    return [int(v) for v in op.attrs.get("value", ())]
