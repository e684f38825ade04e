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
from ..graph_patterns import SWAP_LAST_TWO, unrepeated_heads as _unrepeated


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
