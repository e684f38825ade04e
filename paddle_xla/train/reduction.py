"""How a program's loss reduces its batch: a mean or a sum. It decides how the losses (and gradients)
of micro-batches and replicas combine: averaged for a mean, added for a sum. Misread, it would scale
the gradients by replicas x micro-batches without a sound, so the program is read conservatively:
through ops that keep a mean a mean and a sum a sum, and nothing else. Paddle-free."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..graph import Graph, Op

_MEANS = frozenset({"pd_op.mean", "pd_op.mean_all"})
_SUMS = frozenset({"pd_op.sum"})
# NOTE: ops that pass their input 0 through unchanged in value, or in shape only.
_SAME = frozenset(f"pd_op.{n}" for n in ("cast", "assign", "reshape", "squeeze", "unsqueeze", "flatten"))
_CONSTANTS = frozenset({"pd_op.full", "pd_op.full_like"})


def loss_reduction(graph: Graph) -> tuple[str | None, Op | None]:
    """("mean" | "sum", None), or (None, the op where the reading stopped) when it is not conclusive.

    Per-example losses (a batch dimension in the loss) are summed by the step, so they count as "sum"."""
    loss = graph.fetches[0]
    if any(d == -1 for d in loss.shape):
        return "sum", None
    producer = {v: op for op in graph.block.ops for v in op.outputs}
    return _walk(loss.value, producer)


def _walk(value: int | None, producer: Mapping[Any, Op]) -> tuple[str | None, Op | None]:
    op = producer.get(value)
    if op is None:
        return None, None
    if op.name in _MEANS:
        return "mean", None
    if op.name in _SUMS:
        return "sum", None
    if op.attrs.get("reduction") in ("mean", "sum"):  # nll_loss, kldiv_loss, ...
        return op.attrs["reduction"], None
    if op.name in _SAME:
        return _walk(op.inputs[0], producer)
    if op.name == "pd_op.scale" and not op.attrs.get("bias") and _constant(op.inputs[1:2], producer):
        return _walk(op.inputs[0], producer)
    if op.name in ("pd_op.add", "pd_op.subtract"):
        left, right = _walk(op.inputs[0], producer), _walk(op.inputs[1], producer)
        if left[0] is not None and left[0] == right[0]:
            return left
        return (None, left[1] or right[1] or op) if left[0] is None or right[0] is None else (None, op)
    if op.name == "pd_op.multiply":
        for i in (0, 1):
            if _constant(op.inputs[1 - i : 2 - i], producer):
                return _walk(op.inputs[i], producer)
    if op.name == "pd_op.divide" and _constant(op.inputs[1:2], producer):
        return _walk(op.inputs[0], producer)
    return None, op


def _constant(values, producer: Mapping[int, Op]) -> bool:
    """Whether every given value is absent or a constant the program fills in (pd_op.full)."""
    return all(v is None or getattr(producer.get(v), "name", None) in _CONSTANTS for v in values)
