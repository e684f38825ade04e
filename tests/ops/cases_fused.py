"""Fused LLM ops that Paddle can run on CPU: fused_rms_norm (pd_op.fused_rms_norm_quant) and fused_layer_norm
(pd_op.fused_bias_residual_layernorm), compared with Paddle's own CPU kernels. Forward only: Paddle has no
CPU gradient kernel for either. The fused ops without a CPU kernel are tested in test_fused.py against the
same computation written with Paddle's plain ops.

Each case also carries that computation in plain ops (`plain`): Paddle's fused-norm CPU kernels die with
SIGILL on AVX2-only CPUs (AMD EPYC), where the plain form is the reference; test_ops.py checks the plain
forms against the kernels wherever these run."""

import paddle
from paddle.incubate.nn import functional as IF

from .harness import Arg, OpCase

RMS, LN = ["pd_op.fused_rms_norm_quant"], ["pd_op.fused_bias_residual_layernorm"]
X, R, W = Arg((2, 3, 8)), Arg((2, 3, 8)), Arg((8,))
_TOL = dict(rtol=1e-5, atol=1e-5, grad=False, reason="float32 statistics summed in another order")


def _affine(y, w, nb, axis):
    shape = y.shape[axis:]
    y = y if w is None else y * w.reshape(shape)
    return y if nb is None else y + nb.reshape(shape)


def rms_plain(x, w, nb, eps, axis, bias=None, residual=None):
    """fused_rms_norm's eager (out, residual_out): RMSNorm(x + bias + residual) * w + nb, where bias joins only
    with a residual."""
    h = x if residual is None else (x + residual if bias is None else x + bias + residual)
    inv = paddle.rsqrt(paddle.mean(h * h, axis=list(range(axis, x.ndim)), keepdim=True) + eps)
    return _affine(h * inv, w, nb, axis), (h if residual is not None else None)


def ln_plain(x, w, nb, eps, axis, alpha=1.0, bias=None, residual=None):
    """fused_layer_norm's (out, residual_out, mean, inv_std): LayerNorm(x + alpha * residual + bias) * w + nb,
    or with a residual and neither w nor nb the plain sum."""
    h = x if residual is None else (x + alpha * residual if bias is None else x + alpha * residual + bias)
    axes = list(range(axis, x.ndim))
    mean = paddle.mean(h, axis=axes, keepdim=True)
    inv = paddle.rsqrt(paddle.mean(paddle.square(h - mean), axis=axes, keepdim=True) + eps)
    out = h if residual is not None and w is None and nb is None else _affine((h - mean) * inv, w, nb, axis)
    return out, h, mean.reshape([-1]), inv.reshape([-1])


CASES = [
    # ---- fused_rms_norm: RMSNorm(x + bias + residual) * weight + norm_bias ----
    OpCase(
        "fused_rms_norm_residual_bias",
        lambda x, w, nb, b, r: IF.fused_rms_norm(x, w, nb, 1e-6, 2, bias=b, residual=r),
        [X, W, W, W, R],
        RMS,
        plain=lambda x, w, nb, b, r: rms_plain(x, w, nb, 1e-6, 2, bias=b, residual=r),
        **_TOL,
    ),
    OpCase(
        "fused_rms_norm_residual",
        lambda x, w, r: IF.fused_rms_norm(x, w, None, 1e-5, 2, residual=r),
        [X, W, R],
        RMS,
        plain=lambda x, w, r: rms_plain(x, w, None, 1e-5, 2, residual=r),
        **_TOL,
    ),
    # NOTE: without a residual, residual_out is a value of no type in the program (empty in eager), so the
    # calls return out alone.
    OpCase(
        "fused_rms_norm_plain",
        lambda x, w: IF.fused_rms_norm(x, w, None, 1e-6, 2)[0],
        [X, W],
        RMS,
        plain=lambda x, w: rms_plain(x, w, None, 1e-6, 2)[0],
        **_TOL,
    ),
    OpCase(
        "fused_rms_norm_bias_without_residual",
        lambda x, w, b: IF.fused_rms_norm(x, w, None, 1e-6, 2, bias=b)[0],
        [X, W, W],
        RMS,
        plain=lambda x, w, b: rms_plain(x, w, None, 1e-6, 2, bias=b)[0],
        **_TOL,
    ),
    OpCase(
        "fused_rms_norm_axis1",
        lambda x, w, nb: IF.fused_rms_norm(x, w, nb, 1e-6, 1)[0],
        [X, Arg((24,)), Arg((24,))],
        RMS,
        plain=lambda x, w, nb: rms_plain(x, w, nb, 1e-6, 1)[0],
        **_TOL,
    ),
    # ---- fused_layer_norm: LayerNorm(x + bias + residual_alpha * residual) ----
    OpCase(
        "fused_layer_norm_residual_bias",
        lambda x, w, nb, b, r: IF.fused_layer_norm(
            x, w, nb, 1e-5, residual_alpha=0.5, begin_norm_axis=2, bias=b, residual=r
        ),
        [X, W, W, W, R],
        LN,
        plain=lambda x, w, nb, b, r: ln_plain(x, w, nb, 1e-5, 2, alpha=0.5, bias=b, residual=r),
        **_TOL,
    ),
    OpCase(
        "fused_layer_norm_residual_axis1",
        lambda x, w, nb, r: IF.fused_layer_norm(x, w, nb, 1e-5, begin_norm_axis=1, residual=r),
        [X, Arg((24,)), Arg((24,)), R],
        LN,
        plain=lambda x, w, nb, r: ln_plain(x, w, nb, 1e-5, 1, residual=r),
        **_TOL,
    ),
    # NOTE: without a residual, residual_out is never written: the normalised output and statistics compare.
    OpCase(
        "fused_layer_norm_plain",
        lambda x, w, nb: IF.fused_layer_norm(x, w, nb, 1e-5, begin_norm_axis=2),
        [X, W, W],
        LN,
        outputs=[0, 2, 3],
        plain=lambda x, w, nb: ln_plain(x, w, nb, 1e-5, 2),
        **_TOL,
    ),
    OpCase(
        "fused_layer_norm_weight_only",
        lambda x, w: IF.fused_layer_norm(x, w, None, 1e-5, begin_norm_axis=2),
        [X, W],
        LN,
        outputs=[0, 2, 3],
        plain=lambda x, w: ln_plain(x, w, None, 1e-5, 2),
        **_TOL,
    ),
    # NOTE: a residual and no norm weights is the kernel's plain fused add; it writes no statistics.
    OpCase(
        "fused_layer_norm_add_only",
        lambda x, b, r: IF.fused_layer_norm(
            x, None, None, 1e-5, residual_alpha=0.25, begin_norm_axis=2, bias=b, residual=r
        ),
        [X, W, R],
        LN,
        outputs=[0],
        plain=lambda x, b, r: ln_plain(x, None, None, 1e-5, 2, alpha=0.25, bias=b, residual=r),
        **_TOL,
    ),
]

# Lowerings of ops with no CPU kernel in Paddle: tested in test_fused.py.
COVERED = [
    "pd_op.fused_rms_norm_ext",
    "pd_op.rms_norm",
    "pd_op.fused_rotary_position_embedding",
    "pd_op.flash_attn",
    "pd_op.flash_attn_qkvpacked",
    "pd_op.flash_attn_unpadded",
    "pd_op.fused_bias_act",
    "pd_op.fused_dropout_add",
    "pd_op.fused_gemm_epilogue",
    "pd_op.int_bincount",
    "pd_op.expand_modality_expert_id",
    "pd_op.cal_aux_loss",
]
