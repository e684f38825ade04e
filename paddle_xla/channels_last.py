"""CNN activations held channels-last (NHWC) between the ops that can take them so: convolutions,
batch norm, pooling and elementwise ops; turned back to NCHW only where another op reads them.

XLA:CPU's convolutions and GEMMs want channels last, so a NCHW program pays two transposes around
every convolution (and their gradients in training). An interpreter wrapped here tracks which values
it holds as NHWC; every other reader, and whoever reads the environment after the block (fetches,
buffer updates, a pipeline stage's outputs), sees the layout the program declares. Paddle-free."""
from __future__ import annotations

from dataclasses import replace

import jax.numpy as jnp

from .graph import Block, Graph
from .lower import Interpreter
from .ops.conv import from_nhwc, to_nhwc
from .ops.util import on_xla_cpu

CONV_OPS = frozenset({"pd_op.conv2d", "pd_op.depthwise_conv2d"})
# NOTE: ops that read and write NCHW activations elementwise; their output keeps their input's layout.
ELEMENTWISE_UNARY = frozenset(f"pd_op.{n}" for n in (
    "relu", "relu_", "relu6", "sigmoid", "silu", "swish", "hardswish", "hardsigmoid", "leaky_relu", "gelu",
    "tanh", "elu", "mish", "cast", "assign"))
ELEMENTWISE_BINARY = frozenset(f"pd_op.{n}" for n in ("add", "add_", "subtract", "multiply", "maximum", "minimum"))
# NOTE: ops with a data_format attribute that take NHWC as Paddle defines it (output 0 is the activation).
CHANNELS_ATTR = frozenset({"pd_op.batch_norm", "pd_op.batch_norm_", "pd_op.pool2d"})


def can_hold_channels_last(graph: Graph) -> bool:
    """A Graph with a NCHW convolution and no sub-blocks (a loop carry must keep its declared layout)."""
    return any(op.name in CONV_OPS and op.attrs.get("data_format", "NCHW") == "NCHW" for op in graph.ops()) \
        and not any(op.blocks for op in graph.ops())


def conv_filters(graph: Graph) -> frozenset[int]:
    """The value ids read as a convolution's filter."""
    return frozenset(op.inputs[1] for op in graph.ops() if op.name in CONV_OPS)


def for_cpu(base: type[Interpreter], graph: Graph) -> type[Interpreter]:
    """`base` holding `graph`'s activations channels-last where that pays: XLA:CPU (ResNet-50 b8 bf16
    training step, in-process A/B: bf16 1.81 -> 1.57 s, fp32 2.35 -> 2.07 s), on a Graph that can."""
    if not on_xla_cpu() or not can_hold_channels_last(graph):
        return base
    return with_channels_last(base, conv_filters(graph))


def with_channels_last(base: type[Interpreter], filter_values: frozenset[int]) -> type[Interpreter]:
    """`base`, holding NCHW activations as NHWC from a convolution whose filter is one of
    `filter_values` onwards, through the ops that take them so."""

    def run_block(self, block: Block, env):
        held = self.__dict__.setdefault("held_nhwc", set())       # value ids whose env entry is NHWC
        env = base.run_block(self, block, env)
        # NOTE: every held value back to NCHW for whoever reads env next; XLA drops the transposes
        # nobody reads.
        for v in held:
            env[v] = from_nhwc(env[v], "NCHW")
        held.clear()
        return env

    def apply(self, op, args, env):
        held = self.held_nhwc
        ins = [v in held for v in op.inputs]
        if _takes_nhwc(op, args, ins, filter_values):
            outs = base.apply(self, _as_nhwc(op), _nhwc_operands(op, args, ins), env)
            held.add(op.outputs[0])
            return outs
        # NOTE: any other reader sees NCHW, as the program declares it.
        args = [from_nhwc(a, "NCHW") if h else a for a, h in zip(args, ins)]
        return base.apply(self, op, args, env)

    return type(f"{base.__name__}_NHWC", (base,), {"run_block": run_block, "apply": apply})


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
        return [a if h else to_nhwc(jnp.reshape(a, (1,) * (4 - a.ndim) + a.shape), "NCHW")
                for a, h in zip(args, ins)]
    first = args[0] if ins[0] else to_nhwc(args[0], "NCHW")
    return [first, *args[1:]]


def _as_nhwc(op):
    if op.name in CONV_OPS or op.name in CHANNELS_ATTR:
        return replace(op, attrs={**op.attrs, "data_format": "NHWC"})
    return op
