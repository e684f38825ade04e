"""A generation program's means over the last axis, in a fixed order.

A decode step's RMS norm takes the mean of its squares over the hidden size. XLA:CPU's reduce rounded that
mean 1 ulp otherwise at 2-5 rows than at 32, so a paged server's step of a few rows would have given a row
other numbers than the full batch's step gives it. This rewrite turns each pd_op.mean into
paddle_xla.row_mean (ops/fixed_order.py), which sums the last axis in one fixed order and takes any other
mean as pd_op.mean does. Paddle-free."""

from __future__ import annotations

import dataclasses

from ..graph import Graph


def rewrite(graph: Graph) -> Graph:
    """The graph with its pd_op.mean ops as paddle_xla.row_mean."""
    if not any(op.name == "pd_op.mean" for op in graph.block.ops):
        return graph
    ops = tuple(
        dataclasses.replace(op, name="paddle_xla.row_mean") if op.name == "pd_op.mean" else op for op in graph.block.ops
    )
    return dataclasses.replace(graph, block=dataclasses.replace(graph.block, ops=ops))
