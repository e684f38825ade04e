"""CNN activations held channels-last (NHWC) between the ops that can take them so: convolutions,
batch norm, pooling and elementwise ops; turned back to NCHW only where another op reads them.

XLA:CPU's convolutions and GEMMs want channels last, so a NCHW program pays two transposes around
every convolution (and their gradients in training). An interpreter with a Tracker knows which values
it holds as NHWC; every other reader, and whoever reads the environment after the block (fetches,
buffer updates, a pipeline stage's outputs), sees the layout the program declares.
LoweringPolicy.channels_last turns it on (the measured best on XLA:CPU: ResNet-50 b8 bf16 training
step, in-process A/B, 1.81 -> 1.57 s; fp32 2.35 -> 2.07 s). Paddle-free."""

from __future__ import annotations

from dataclasses import replace

import jax.numpy as jnp

from .. import ops as _every_lowering  # noqa: F401  (the queries below read every declaration)
from ..graph import Graph
from ..ops.conv import from_nhwc, to_nhwc
from ..ops.registry import ops_where

# NOTE: each op declares its class where it is registered (`@lowering(..., layout="conv")`;
# ops.registry.LAYOUT_CLASSES says what each means); these are queries on the registry.
CONV_OPS = ops_where(layout="conv")
# NOTE: ops that read and write NCHW activations elementwise; their output keeps their input's layout.
ELEMENTWISE_UNARY = ops_where(layout="unary")
ELEMENTWISE_BINARY = ops_where(layout="binary")
# NOTE: ops with a data_format attribute that take NHWC as Paddle defines it (output 0 is the activation).
CHANNELS_ATTR = ops_where(layout="data_format")


def can_hold_channels_last(graph: Graph) -> bool:
    """A Graph with a NCHW convolution and no sub-blocks (a loop carry must keep its declared layout)."""
    return any(op.name in CONV_OPS and op.attrs.get("data_format", "NCHW") == "NCHW" for op in graph.ops()) and not any(
        op.blocks for op in graph.ops()
    )


def conv_filters(graph: Graph) -> frozenset[int]:
    """The value ids read as a convolution's filter."""
    return frozenset(op.inputs[1] for op in graph.ops() if op.name in CONV_OPS)


class Tracker:
    """Which values an interpreter holds as NHWC. It runs a convolution whose filter is one of
    `filters` (and what follows it, as far as the ops take it) channels-last."""

    def __init__(self, filters: frozenset[int]):
        self.filters = filters
        self.held: set[int] = set()

    def enter(self, op, args):
        """(the op as it runs, its operands, whether its output 0 comes out NHWC)."""
        ins = [v in self.held for v in op.inputs]
        if _takes_nhwc(op, args, ins, self.filters):
            return _as_nhwc(op), _nhwc_operands(op, args, ins), True
        # NOTE: any other reader sees NCHW, as the program declares it.
        return op, [from_nhwc(a, "NCHW") if h else a for a, h in zip(args, ins)], False

    def hold(self, value: int) -> None:
        self.held.add(value)

    def release(self, env: dict) -> None:
        """Every held value back to NCHW for whoever reads env next; XLA drops the transposes nobody reads."""
        for v in self.held:
            env[v] = from_nhwc(env[v], "NCHW")
        self.held.clear()


def _is_activation(x) -> bool:
    return getattr(x, "ndim", 0) == 4


def _takes_nhwc(op, args, ins, filter_values) -> bool:
    """Whether `op` runs on NHWC operands here (and writes its output 0 NHWC)."""
    if not args or not _is_activation(args[0]):
        return False
    if op.name in CONV_OPS:
        return op.inputs[1] in filter_values and op.attrs.get("data_format", "NCHW") == "NCHW"
    if op.name in CHANNELS_ATTR:
        return ins[0] and op.attrs.get("data_format", "NCHW") == "NCHW"
    if op.name in ELEMENTWISE_UNARY:
        return ins[0] and all(a is None or not _is_activation(a) for a in args[1:])
    if op.name in ELEMENTWISE_BINARY:
        return len(args) == 2 and any(ins) and all(getattr(a, "ndim", 5) <= 4 for a in args)
    return False


def _nhwc_operands(op, args, ins):
    """The operands an op that _takes_nhwc reads: its activation NHWC; a binary op's other operand,
    broadcast as NumPy does (leading ones to 4-D: a conv bias [1, C, 1, 1], a scalar), NHWC as well."""
    if op.name in ELEMENTWISE_BINARY:
        return [a if h else to_nhwc(jnp.reshape(a, (1,) * (4 - a.ndim) + a.shape), "NCHW") for a, h in zip(args, ins)]
    first = args[0] if ins[0] else to_nhwc(args[0], "NCHW")
    return [first, *args[1:]]


def _as_nhwc(op):
    if op.name in CONV_OPS or op.name in CHANNELS_ATTR:
        return replace(op, attrs={**op.attrs, "data_format": "NHWC"})
    return op
