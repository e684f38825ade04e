"""Fused LLM ops that Paddle can run on CPU: fused_rms_norm (pd_op.fused_rms_norm_quant) and fused_layer_norm
(pd_op.fused_bias_residual_layernorm), compared with Paddle's own CPU kernels. Forward only: Paddle has no
CPU gradient kernel for either. The fused ops without a CPU kernel are tested in test_fused.py against the
same computation written with Paddle's plain ops."""
from paddle.incubate.nn import functional as IF

from .harness import Arg, OpCase

RMS, LN = ["pd_op.fused_rms_norm_quant"], ["pd_op.fused_bias_residual_layernorm"]
X, R, W = Arg((2, 3, 8)), Arg((2, 3, 8)), Arg((8,))
_TOL = dict(rtol=1e-5, atol=1e-5, grad=False, reason="float32 statistics summed in another order")

CASES = [
    # ---- fused_rms_norm: RMSNorm(x + bias + residual) * weight + norm_bias ----
    OpCase("fused_rms_norm_residual_bias", lambda x, w, nb, b, r: IF.fused_rms_norm(x, w, nb, 1e-6, 2, bias=b,
                                                                                    residual=r),
           [X, W, W, W, R], RMS, **_TOL),
    OpCase("fused_rms_norm_residual", lambda x, w, r: IF.fused_rms_norm(x, w, None, 1e-5, 2, residual=r),
           [X, W, R], RMS, **_TOL),
    # NOTE: without a residual, residual_out is a value of no type in the program (empty in eager), so the
    # calls return out alone.
    OpCase("fused_rms_norm_plain", lambda x, w: IF.fused_rms_norm(x, w, None, 1e-6, 2)[0], [X, W], RMS,
           **_TOL),
    OpCase("fused_rms_norm_bias_without_residual",
           lambda x, w, b: IF.fused_rms_norm(x, w, None, 1e-6, 2, bias=b)[0], [X, W, W], RMS, **_TOL),
    OpCase("fused_rms_norm_axis1", lambda x, w, nb: IF.fused_rms_norm(x, w, nb, 1e-6, 1)[0],
           [X, Arg((24,)), Arg((24,))], RMS, **_TOL),
    # ---- fused_layer_norm: LayerNorm(x + bias + residual_alpha * residual) ----
    OpCase("fused_layer_norm_residual_bias",
           lambda x, w, nb, b, r: IF.fused_layer_norm(x, w, nb, 1e-5, residual_alpha=0.5, begin_norm_axis=2,
                                                      bias=b, residual=r),
           [X, W, W, W, R], LN, **_TOL),
    OpCase("fused_layer_norm_residual_axis1",
           lambda x, w, nb, r: IF.fused_layer_norm(x, w, nb, 1e-5, begin_norm_axis=1, residual=r),
           [X, Arg((24,)), Arg((24,)), R], LN, **_TOL),
    # NOTE: without a residual, residual_out is never written: the normalised output and statistics compare.
    OpCase("fused_layer_norm_plain", lambda x, w, nb: IF.fused_layer_norm(x, w, nb, 1e-5, begin_norm_axis=2),
           [X, W, W], LN, outputs=[0, 2, 3], **_TOL),
    OpCase("fused_layer_norm_weight_only",
           lambda x, w: IF.fused_layer_norm(x, w, None, 1e-5, begin_norm_axis=2), [X, W], LN,
           outputs=[0, 2, 3], **_TOL),
    # NOTE: a residual and no norm weights is the kernel's plain fused add; it writes no statistics.
    OpCase("fused_layer_norm_add_only",
           lambda x, b, r: IF.fused_layer_norm(x, None, None, 1e-5, residual_alpha=0.25, begin_norm_axis=2,
                                               bias=b, residual=r),
           [X, W, R], LN, outputs=[0], **_TOL),
]

# Lowerings of ops with no CPU kernel in Paddle: tested in test_fused.py.
COVERED = ["pd_op.fused_rms_norm_ext", "pd_op.rms_norm", "pd_op.fused_rotary_position_embedding",
           "pd_op.flash_attn", "pd_op.flash_attn_qkvpacked", "pd_op.flash_attn_unpadded",
           "pd_op.fused_bias_act", "pd_op.fused_dropout_add", "pd_op.fused_gemm_epilogue"]
