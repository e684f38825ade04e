"""Where a LoweringPolicy computes an op otherwise than its registered lowering: in half precision, in
the form the target's kernels run fastest, or on weights the runtime holds in another layout.

Each rule is a small function (op, operands, attributes, context) -> Kernel | None, tried in order;
the first that answers computes the op. A Kernel is called like the lowering it replaces, with the
op's validated attributes, inside the interpreter's error context. Every rule that depends on the
target asks the policy, never the process's backend, so an export for another platform is tuned for
that platform. Paddle-free."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax.numpy as jnp

from ..ops.activation import gelu_by_erf
from ..ops.conv import is_pointwise_conv, pointwise_conv
from ..ops.depthwise import depthwise_by_shifts, is_depthwise, is_narrow, narrow_conv_by_shifts
from ..ops.pool import max_pool_by_shifts, shifted_max_pool
from .channels_last import CONV_OPS
from .half import half_matmul, half_pointwise_conv, is_float
from .int8 import Int8Weight, int8_matmul
from .layouts import conv_hwio, matmul_nk
from .policy import LoweringPolicy


@dataclass(frozen=True)
class Kernel:
    fn: Callable  # fn(*operands, **attributes)
    cast: bool  # whether the operands pass through the precision policy first


@dataclass(frozen=True)
class KernelContext:
    policy: LoweringPolicy
    half: Any  # the half dtype of a bf16/fp16 policy, else None
    hwio_filters: frozenset  # value ids of the filters the runtime holds as HWIO
    nk_weights: frozenset = frozenset()  # value ids of the matmul weights the runtime holds as [N, K]


def _conv_by_shifts(op, args, attrs, ctx: KernelContext):
    # NOTE: XLA:CPU's grouped convolution runs depthwise filters 15-35x slower than fused shifted
    # multiply-adds (ops/depthwise.py has the figures); cuDNN's and TPU's own kernels are better there.
    if not (ctx.policy.on_cpu and op.name in CONV_OPS and is_float(args[0])):
        return None
    hwio = op.inputs[1] in ctx.hwio_filters
    form = None
    if is_depthwise(args[0], args[1], hwio=hwio, **attrs):
        form = depthwise_by_shifts
    # NOTE: an RGB stem the same way, 2-4x faster than the convolution emitter (ops/depthwise.py);
    # (in-process A/B on 2 cores: MobileNetV3-large b8 20.4 -> 19.0 ms, b1 4.70 -> 4.45 ms, PP-LCNet b8 -2 %)
    elif is_narrow(args[0], args[1], hwio=hwio, **attrs):
        form = narrow_conv_by_shifts
    if form is None:
        return None
    # NOTE: an operand may be half already (a filter held so: half.half_weight_names); float64 keeps its path
    if ctx.half is None or any(a.dtype not in (jnp.float32, ctx.half) for a in args[:2]):
        return Kernel(partial(form, hwio=hwio), cast=True)
    return Kernel(partial(_on_half_values, partial(form, hwio=hwio), half=ctx.half), cast=False)


def _on_half_values(form, x, w, *, half, **attrs):
    """An O1 white-list convolution by shifts: the operands (float32 or half) rounded to half, the products
    summed in float32, the result rounded to half, as a half convolution would give. The operands stay
    float32 in memory.

    NOTE: XLA:CPU widens a half operand to float32 at every tap; fed rounded float32 instead, a 3x3
    depthwise (8x72x56², 1 core) runs 2.6 -> 2.0 ms. In-process A/B, 2 cores, bf16 batch 8, two rounds:
    MobileNetV3-large 32.5 -> 27.7 ms, -small 15.5 -> 11.4, PP-LCNet 19.4 -> 15.4, CRNN 44.9 -> 38.9;
    MobileNetV3-large batch 1 8.0 -> 6.8."""

    def rounded(v):
        return v.astype(half).astype(jnp.float32)

    return form(rounded(x), rounded(w), **attrs).astype(half)


def _hwio_conv(op, args, attrs, ctx: KernelContext):
    if op.name in CONV_OPS and op.inputs[1] in ctx.hwio_filters:
        return Kernel(conv_hwio, cast=True)
    return None


def _nk_matmul(op, args, attrs, ctx: KernelContext):
    # NOTE: a weight held as [N, K] must be read so whatever else applies but int8 (layouts.nk_weight_names
    # holds float32 weights only, and only under a float32 policy)
    if op.name == "pd_op.matmul" and op.inputs[1] in ctx.nk_weights:
        return Kernel(matmul_nk, cast=True)
    return None


def _int8_matmul(op, args, attrs, ctx: KernelContext):
    # NOTE: a weight the runtime holds as weight-only int8 (runtime/held.py) arrives as an Int8Weight
    if op.name == "pd_op.matmul" and isinstance(args[1], Int8Weight):
        return Kernel(partial(int8_matmul, half=ctx.half), cast=False)
    return None


def _half_matmul(op, args, attrs, ctx: KernelContext):
    # NOTE: every float matmul as a half x half -> float32 dot, gradients included (half.half_matmul);
    # it casts inside, so the gradients leave in float32.
    if ctx.half is not None and op.name == "pd_op.matmul" and all(is_float(a) for a in args):
        return Kernel(partial(half_matmul, half=ctx.half, cpu=ctx.policy.on_cpu), cast=False)
    return None


def _half_pointwise_conv(op, args, attrs, ctx: KernelContext):
    # NOTE: ResNet-50 bf16 training step on CPU, in-process A/B: 2.95 -> 1.78 s. Elsewhere the backend's
    # own convolutions (cuDNN, TPU) are the better kernels.
    if (
        ctx.half is not None
        and ctx.policy.on_cpu
        and op.name == "pd_op.conv2d"
        and is_float(args[0])
        and is_pointwise_conv(args[1], **attrs)
    ):
        return Kernel(partial(_half_1x1, half=ctx.half), cast=False)
    return None


def _half_1x1(x, w, *, half, strides, data_format="NCHW", **_same_as_is_pointwise):
    return half_pointwise_conv(x, w, half=half, data_format=data_format, strides=strides)


def _half_gelu(op, args, attrs, ctx: KernelContext):
    # NOTE: BERT-Base bf16 inference, in-process A/B: -1.6 % (the FFN's GELU fusion 29 -> 13 ms).
    if ctx.half is not None and op.name == "pd_op.gelu" and is_float(args[0]):
        return Kernel(gelu_by_erf, cast=False)
    return None


def _pointwise_conv(op, args, attrs, ctx: KernelContext):
    # NOTE: on XLA:CPU a 1x1 convolution runs 1.5-3x faster as a GEMM over the pixels than through the
    # convolution emitter (ResNet-50's 8x256x56x56 -> 64: 27 -> 11 ms forward, 43 -> 21 ms backward).
    if (
        ctx.half is None
        and ctx.policy.on_cpu
        and op.name in CONV_OPS
        and getattr(args[0], "ndim", 0) == 4
        and args[0].dtype == jnp.float32
        and is_pointwise_conv(args[1], **attrs)
    ):
        return Kernel(_fp32_1x1, cast=True)
    return None


def _fp32_1x1(x, w, *, strides, data_format="NCHW", **_same_as_is_pointwise):
    return pointwise_conv(x, w, strides, data_format)


def _max_pool_by_shifts(op, args, attrs, ctx: KernelContext):
    # NOTE: forward programs only: the shifted maxima's gradient would split ties, Paddle gives it to
    # the window's first maximum. (ResNet-50 b8 fp32 inference, in-process A/B on 2 cores: 215.5 -> 212.5 ms)
    if ctx.policy.on_cpu and ctx.policy.forward_only and op.name == "pd_op.pool2d" and shifted_max_pool(*args, **attrs):
        return Kernel(max_pool_by_shifts, cast=True)
    return None


# NOTE: in order: a filter held as HWIO must be read as HWIO whatever else applies (the depthwise
# form reads either layout), and a matmul weight held as [N, K] as [N, K] (unless it arrives as int8:
# the plan marks the matmul weights a policy may hold as [N, K], the runtime holds some as int8 instead).
# The rules stay here rather than on the ops' registrations: each is the
# policy's choice (target, precision, held layouts, operand shapes) and calls lowering/ code (half.py,
# layouts.py), which ops/ may not import; the op classes they test are registry queries (CONV_OPS),
# and every op a rule names is checked to be registered (tests/ops/test_op_properties.py).
RULES = (
    _conv_by_shifts,
    _hwio_conv,
    _int8_matmul,
    _nk_matmul,
    _half_matmul,
    _half_pointwise_conv,
    _half_gelu,
    _pointwise_conv,
    _max_pool_by_shifts,
)


def choose(op, args, attrs, ctx: KernelContext) -> Kernel | None:
    for rule in RULES:
        kernel = rule(op, args, attrs, ctx)
        if kernel is not None:
            return kernel
    return None
