"""Weights held on the device in the layout the backend's kernels read, for inference programs.

Paddle stores conv filters as [out, in/groups, kh, kw] (OIHW). XLA:CPU's convolutions read HWIO, so
a program fed OIHW filters transposes every filter on every call (ResNet-50: ~25 M floats per call).
An inference program's weights do not change, so the filters are transposed once, when the model is
compiled, and the convolutions are told so.

The activations of a CNN are held channels-last (NHWC) between the ops that can take them so
(convolutions, batch norm, pooling, elementwise ops), and turned back to NCHW only where another op
reads them: XLA:CPU's convolutions and GEMMs want channels last, and a NCHW program pays two
transposes around every convolution. Paddle-free."""
from __future__ import annotations

from dataclasses import replace

import jax.numpy as jnp
from jax import lax

from .graph import Block, Graph
from .lower import Interpreter
from .ops import conv as conv_ops

FILTER_OPS = frozenset({"pd_op.conv2d", "pd_op.depthwise_conv2d"})
OIHW_TO_HWIO = (2, 3, 1, 0)


def hwio_filter_names(graph: Graph) -> set[str]:
    """Float 4-D parameters read only as the filter (operand 1) of a 2-D convolution."""
    floats = {p.name for p in graph.params
              if len(p.shape) == 4 and p.dtype in ("float32", "float16", "bfloat16", "float64")}
    return floats & graph.params_read_only_by(lambda op, i: op in FILTER_OPS and i == 1)


def with_hwio_filters(base: type[Interpreter], filter_values: frozenset[int],
                      channels_last: bool = False) -> type[Interpreter]:
    """`base` with the convolutions whose filter is one of `filter_values` reading it as HWIO; with
    `channels_last`, NCHW activations held as NHWC between the ops that take them so (a Graph without
    sub-blocks only: a loop carry must keep the layout the program declares)."""

    def apply(self, op, args, env):
        if op.name in FILTER_OPS and op.inputs[1] in filter_values:
            # NOTE: through the base's precision policy: a bf16 program's convolutions run in bf16
            # (before, this skipped the cast and ran them in float32 on upcast half filters).
            return (_conv_hwio(*self.cast_operands(op, args), **op.attrs),)
        return base.apply(self, op, args, env)

    cls = type(f"{base.__name__}_HWIO", (base,), {"apply": apply})
    return _with_channels_last(cls, filter_values) if channels_last else cls


def can_hold_channels_last(graph: Graph) -> bool:
    return not any(op.blocks for op in graph.ops())


# ---- channels-last activations ----------------------------------------------------------------------
# NOTE: ops that read and write NCHW activations elementwise; their output keeps their input's layout.
ELEMENTWISE_UNARY = frozenset(f"pd_op.{n}" for n in (
    "relu", "relu_", "relu6", "sigmoid", "silu", "swish", "hardswish", "hardsigmoid", "leaky_relu", "gelu",
    "tanh", "elu", "mish", "cast", "assign"))
ELEMENTWISE_BINARY = frozenset(f"pd_op.{n}" for n in ("add", "add_", "subtract", "multiply", "maximum", "minimum"))
# NOTE: ops with a data_format attribute that take NHWC as Paddle defines it (output 0 is the activation).
CHANNELS_ATTR = frozenset({"pd_op.batch_norm", "pd_op.batch_norm_", "pd_op.pool2d"})
TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def _with_channels_last(base: type[Interpreter], filter_values: frozenset[int]) -> type[Interpreter]:

    def run_block(self, block: Block, env):
        held = self.__dict__.setdefault("held_nhwc", set())       # value ids whose env entry is NHWC
        env = base.run_block(self, block, env)
        # NOTE: every held value back to NCHW for whoever reads env next (fetches, buffer updates);
        # XLA drops the transposes nobody reads.
        for v in held:
            env[v] = jnp.transpose(env[v], TO_NCHW)
        held.clear()
        return env

    def apply(self, op, args, env):
        held = self.held_nhwc
        ins = [v in held for v in op.inputs]
        if _takes_nhwc(op, args, ins, filter_values):
            args = _nhwc_operands(op, args, ins)
            outs = base.apply(self, _as_nhwc(op), args, env)
            held.add(op.outputs[0])
            return outs
        # NOTE: any other reader sees NCHW, as the program declares it.
        args = [jnp.transpose(a, TO_NCHW) if h else a for a, h in zip(args, ins)]
        return base.apply(self, op, args, env)

    return type(f"{base.__name__}_NHWC", (base,), {"run_block": run_block, "apply": apply})


def _is_activation(x) -> bool:
    return getattr(x, "ndim", 0) == 4


def _takes_nhwc(op, args, ins, filter_values) -> bool:
    """Whether `op` runs on NHWC operands here (and writes its output 0 NHWC)."""
    if not args or not _is_activation(args[0]):
        return False
    if op.name in FILTER_OPS:
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
        return [a if h else jnp.transpose(jnp.reshape(a, (1,) * (4 - a.ndim) + a.shape), TO_NHWC)
                for a, h in zip(args, ins)]
    first = args[0] if ins[0] else jnp.transpose(args[0], TO_NHWC)
    return [first, *args[1:]]


def _as_nhwc(op):
    if op.name in FILTER_OPS or op.name in CHANNELS_ATTR:
        return replace(op, attrs={**op.attrs, "data_format": "NHWC"})
    return op


def _conv_hwio(x, w, *, strides, paddings, padding_algorithm="EXPLICIT", dilations=(), groups=1,
               data_format="NCHW", **_ignored):
    """conv_ops.conv with an HWIO filter (same padding rules, same data formats)."""
    pads, dil = conv_ops.resolve_padding(paddings, dilations, padding_algorithm,
                                         conv_ops.spatial_shape(x, data_format), strides, w.shape[:2])
    if x.dtype == jnp.bfloat16 and (groups or 1) == 1 and data_format in ("NCHW", "NHWC") \
            and all(lo >= 0 and hi >= 0 for lo, hi in pads):
        return _bf16_conv_as_gemm(x, w.astype(x.dtype), tuple(strides), pads, tuple(dil), data_format)
    io = conv_ops.dimension_numbers(2, data_format)[0]
    return lax.conv_general_dilated(x, w.astype(x.dtype), window_strides=tuple(strides), padding=pads,
                                    rhs_dilation=tuple(dil), dimension_numbers=(io, "HWIO", io),
                                    feature_group_count=groups or 1)


# NOTE: XLA:CPU's convolution emitter runs bf16 slower than float32 (ResNet-50 b8 inference: 558 vs
# 475 ms), while its bf16 x bf16 -> f32 GEMM runs at ~2x the float32 rate. So a bf16 program computes
# each convolution as one GEMM over its patches (im2col), in NHWC: ResNet-50 b8 558 -> 373 ms.
def _bf16_conv_as_gemm(x, w, strides, pads, dil, data_format):
    """A bf16 convolution (HWIO filter, one group) as [N*Ho*Wo, kh*kw*C] x [kh*kw*C, O]."""
    kh, kw, c, o = w.shape
    nhwc = x if data_format == "NHWC" else jnp.transpose(x, (0, 2, 3, 1))
    # NOTE: the patches are gathered as uint16 bit patterns: XLA:CPU widens a bf16 pad, slice or
    # concatenate to float32 and back (twice the bytes; 401 -> 373 ms). bf16's zero is all zero bits.
    bits = lax.bitcast_convert_type(nhwc, jnp.uint16)
    bits = jnp.pad(bits, ((0, 0), tuple(pads[0]), tuple(pads[1]), (0, 0)))
    n, hp, wp, _ = bits.shape
    ho = (hp - dil[0] * (kh - 1) - 1) // strides[0] + 1
    wo = (wp - dil[1] * (kw - 1) - 1) // strides[1] + 1
    cols = [lax.slice(bits, (0, i * dil[0], j * dil[1], 0),
                      (n, i * dil[0] + (ho - 1) * strides[0] + 1, j * dil[1] + (wo - 1) * strides[1] + 1, c),
                      (1, strides[0], strides[1], 1)) for i in range(kh) for j in range(kw)]
    patches = lax.bitcast_convert_type(cols[0] if len(cols) == 1 else jnp.concatenate(cols, axis=-1), x.dtype)
    # NOTE: the HWIO filter flattens to rows (i, j, c), the order in which the patches were stacked.
    out = lax.dot_general(patches.reshape(n * ho * wo, kh * kw * c), w.reshape(kh * kw * c, o),
                          (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    out = out.reshape(n, ho, wo, o).astype(x.dtype)
    return out if data_format == "NHWC" else jnp.transpose(out, (0, 3, 1, 2))
