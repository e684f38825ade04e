"""Weights held on the device in the layout the backend's kernels read, for inference programs.

Paddle stores conv filters as [out, in/groups, kh, kw] (OIHW). XLA:CPU's convolutions read HWIO, so
a program fed OIHW filters transposes every filter on every call (ResNet-50: ~25 M floats per call).
An inference program's weights do not change, so the filters are transposed once, when the model is
compiled, and the convolutions are told so (LoweringPolicy.hwio_filters; kernels.py picks conv_hwio).

Likewise a Linear's weight, [K, N] in Paddle: XLA:CPU's float32 dot runs faster when both operands are
contracted along their minor dimension, so an inference program holds such weights as [N, K]
(LoweringPolicy.nk_weights; kernels.py picks matmul_nk). Paddle-free."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..graph import Graph
from ..ops import conv as conv_ops
from .channels_last import CONV_OPS

OIHW_TO_HWIO = (2, 3, 1, 0)


def hwio_shaped(value):
    """A filter given as OIHW (Paddle's layout), as HWIO: a NumPy or device array, or its shape's stand-in."""
    if hasattr(value, "transpose"):
        return value.transpose(OIHW_TO_HWIO)
    return np.transpose(value, OIHW_TO_HWIO)


def hwio_filter_names(graph: Graph) -> set[str]:
    """Float 4-D parameters read only as the filter (operand 1) of a 2-D convolution."""
    floats = {
        p.name for p in graph.params if len(p.shape) == 4 and p.dtype in ("float32", "float16", "bfloat16", "float64")
    }
    return floats & graph.params_read_only_by(lambda op, i: op in CONV_OPS and i == 1)


def matmul_weight_names(graph: Graph) -> set[str]:
    """2-D float32 parameters read only as the untransposed second operand of pd_op.matmul (by an
    untransposed first one): a runtime may hold them otherwise, since no other op sees them."""
    ok = {p.name for p in graph.params if p.dtype == "float32" and len(p.shape) == 2}
    by_value = {p.value: p.name for p in graph.params}
    for op in graph.ops():
        for i, v in enumerate(op.inputs):
            name = by_value.get(v)
            if name in ok and not (
                op.name == "pd_op.matmul"
                and i == 1
                and not op.attrs.get("transpose_y")
                and not op.attrs.get("transpose_x")
            ):
                ok.discard(name)
    return ok & graph.params_read_only_by(lambda op, i: op == "pd_op.matmul" and i == 1)


nk_weight_names = matmul_weight_names


def nk_shaped(value):
    """A [K, N] matmul weight (Paddle's layout), as [N, K]: a NumPy or device array."""
    return value.T if hasattr(value, "T") else np.transpose(value)


# NOTE: XLA:CPU, float32, 2 cores, in-process A/B, two rounds: the 100M Llama's decode step at 32 rows x 768
# slots 128-131 -> 108-110 ms (its 768 x 32000 head alone at M = 32: 110 -> 177 GFLOP/s), its prefill of
# 32 x 40 tokens unchanged within noise (1.55-1.83 s both ways), same tokens; BERT-Base inference batch 1
# 104-107 -> 98-101 ms, batch 8 622-641 -> 629-670 ms (within noise), same outputs. Small products gain
# most; a lone [M, K] x [K, N] dot varies too much run to run to rank the layouts at other M.
def matmul_nk(x, w_nk, *, transpose_x=False, transpose_y=False):
    """x @ w for a weight held as [N, K]: x's last dimension against w's (a 1-D x is one row). Only
    untransposed matmuls read a held weight (matmul_weight_names)."""
    assert not (transpose_x or transpose_y), "a weight held as [N, K] is read by untransposed matmuls only"
    dtype = jnp.result_type(x, w_nk)
    return lax.dot_general(x.astype(dtype), w_nk.astype(dtype), (((x.ndim - 1,), (1,)), ((), ())))


def conv_hwio(x, w, *, strides, paddings, padding_algorithm="EXPLICIT", dilations=(), groups=1, data_format="NCHW"):
    """conv_ops.conv with an HWIO filter (same padding rules, same data formats)."""
    pads, dil = conv_ops.resolve_padding(
        paddings, dilations, padding_algorithm, conv_ops.spatial_shape(x, data_format), strides, w.shape[:2]
    )
    io = conv_ops.dimension_numbers(2, data_format)[0]
    if (
        x.dtype == jnp.bfloat16
        and (groups or 1) == 1
        and data_format in ("NCHW", "NHWC")
        and all(lo >= 0 and hi >= 0 for lo, hi in pads)
    ):
        if _emitter_wins(w):
            # NOTE: float32 holds every bf16 value and product exactly, so this is the same bf16
            # convolution, accumulated in float32 like the GEMM's, on XLA's convolution emitter.
            f32 = lax.conv_general_dilated(
                x.astype(jnp.float32),
                w.astype(x.dtype).astype(jnp.float32),
                window_strides=tuple(strides),
                padding=pads,
                rhs_dilation=tuple(dil),
                dimension_numbers=(io, "HWIO", io),
            )
            return f32.astype(x.dtype)
        return _bf16_conv_as_gemm(x, w.astype(x.dtype), tuple(strides), pads, tuple(dil), data_format)
    return lax.conv_general_dilated(
        x,
        w.astype(x.dtype),
        window_strides=tuple(strides),
        padding=pads,
        rhs_dilation=tuple(dil),
        dimension_numbers=(io, "HWIO", io),
        feature_group_count=groups or 1,
    )


# NOTE: im2col copies every tap's pixels, and XLA:CPU's concatenate copies a run of a few bf16 channels
# slowly, so the GEMM wins only where many output channels share that copy. 1 core, bf16 im2col + GEMM
# against the float32 emitter: ResNet-50's stem (8x3x224², 7x7/2 -> 64) 59 vs 14 ms; 8x8x112², 3x3 ->
# 32: 10.9 vs 3.8; PicoDet's 5x5 head 8x96x40² -> 1: 46.8 vs 2.5; 8x96x40², 3x3 -> 4 / 32 / 96: 6.8 /
# 7.2 / 9.0 vs 1.5 / 4.5 / 12.4; 8x64x80² -> 64: 40 vs 25, 8x64x56² -> 64: 11.2 vs 11.7; 8x128x20² ->
# 128: 3.3 vs 5.4. A small patch (3x3 over RGB: 27 values, 6.2 vs 8.3 ms) stays a GEMM. ResNet-50 b8
# bf16 inference, in-process A/B on 2 cores (its stem, with the max pool as shifted maxima, kernels.py):
# 129.4 -> 119.7 ms; with few outputs too, bf16 b8: PicoDet-S 79.7 -> 58.7 ms, PP-OCR's DB detector
# 519.5 -> 359.0 (ResNet-50, MobileNetV3 and CRNN unchanged).
THIN_PATCH_CHANNELS, SMALL_PATCH, FEW_OUTPUTS = 32, 36, 64


def _emitter_wins(w) -> bool:
    """Whether a bf16 convolution by this HWIO filter (one group) is faster on the float32 emitter than
    as im2col + GEMM."""
    kh, kw, c, o = w.shape
    if kh * kw == 1 or kh * kw * c <= SMALL_PATCH:
        return False
    return c < THIN_PATCH_CHANNELS or o < FEW_OUTPUTS


# NOTE: XLA:CPU's convolution emitter runs bf16 slower than float32 (ResNet-50 b8 inference: 558 vs
# 475 ms), while its bf16 x bf16 -> f32 GEMM runs at ~2x the float32 rate. So a bf16 program computes
# each convolution as one GEMM over its patches (im2col), in NHWC: ResNet-50 b8 558 -> 373 ms.
def _bf16_conv_as_gemm(x, w, strides, pads, dil, data_format):
    """A bf16 convolution (HWIO filter, one group) as [N*Ho*Wo, kh*kw*C] x [kh*kw*C, O]."""
    kh, kw, c, o = w.shape
    nhwc = conv_ops.to_nhwc(x, data_format)
    # NOTE: the patches are gathered as uint16 bit patterns: XLA:CPU widens a bf16 pad, slice or
    # concatenate to float32 and back (twice the bytes; 401 -> 373 ms). bf16's zero is all zero bits.
    bits = lax.bitcast_convert_type(nhwc, jnp.uint16)
    bits = jnp.pad(bits, ((0, 0), tuple(pads[0]), tuple(pads[1]), (0, 0)))
    n, hp, wp, _ = bits.shape
    ho = (hp - dil[0] * (kh - 1) - 1) // strides[0] + 1
    wo = (wp - dil[1] * (kw - 1) - 1) // strides[1] + 1
    cols = [
        lax.slice(
            bits,
            (0, i * dil[0], j * dil[1], 0),
            (n, i * dil[0] + (ho - 1) * strides[0] + 1, j * dil[1] + (wo - 1) * strides[1] + 1, c),
            (1, strides[0], strides[1], 1),
        )
        for i in range(kh)
        for j in range(kw)
    ]
    patches = lax.bitcast_convert_type(cols[0] if len(cols) == 1 else jnp.concatenate(cols, axis=-1), x.dtype)
    # NOTE: the HWIO filter flattens to rows (i, j, c), the order in which the patches were stacked.
    out = lax.dot_general(
        patches.reshape(n * ho * wo, kh * kw * c),
        w.reshape(kh * kw * c, o),
        (((1,), (0,)), ((), ())),
        preferred_element_type=jnp.float32,
    )
    return conv_ops.from_nhwc(out.reshape(n, ho, wo, o).astype(x.dtype), data_format)
