"""The fused MoE kernels of Paddle's GPU build that ERNIE 4.5's gate calls, lowered where a program holds them on
their own (a program captured on a GPU build of Paddle): cal_aux_loss (the load-balancing loss), int_bincount
(a histogram of expert ids) and expand_modality_expert_id (expert ids laid out by modality). Each computes
what its CUDA kernel in paddle/phi/kernels/gpu computes; Paddle's CPU build has none of them. The ERNIE 4.5
MoE block itself is captured as one op (ops/moe.py), whose router loss is moe_loss.py's."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .registry import lowering
from .util import dtype as jnp_dtype

# NOTE: int_bincount's `dtype` attribute is an int64: a paddle.DataType under PIR (INT32 7, INT64 9), which the
# kernel accepts alone; a name is taken too
_BIN_DTYPES = {7: jnp.int32, 9: jnp.int64}


def _bin_dtype(dtype):
    if isinstance(dtype, str):
        return jnp_dtype(dtype)
    if int(dtype) not in _BIN_DTYPES:
        raise ValueError(f"int_bincount counts in int32 or int64 (paddle.DataType 7 or 9), not dtype {dtype!r}")
    return _BIN_DTYPES[int(dtype)]


@lowering("pd_op.int_bincount")
def int_bincount(x, *, low, high, dtype):
    """[high - low] counts of x's values in [low, high) (cub's HistogramEven: values outside are not counted)."""
    flat = x.reshape(-1)
    inside = (flat >= low) & (flat < high)
    counts = jnp.bincount(jnp.where(inside, flat - low, 0), weights=inside.astype(jnp.int32), length=high - low)
    return counts.astype(_bin_dtype(dtype))


@lowering("pd_op.expand_modality_expert_id")
def expand_modality_expert_id(expert_id, *, num_expert_per_modality, group_size, modality_offset, is_group_expert):
    """expert_id [S, k]: with is_group_expert, the j-th choice moves to group j (+ j * group_size); then, where
    num_expert_per_modality > 0, an id e of rank e // n becomes rank * 2n + e % n + modality_offset * n (the
    kernel's two modalities interleaved per rank)."""
    e = expert_id
    if is_group_expert:
        e = e + (jnp.arange(e.shape[1], dtype=e.dtype) * group_size)[None, :]
    n = num_expert_per_modality
    if n <= 0:
        return e
    return (e // n) * (2 * n) + e % n + modality_offset * n


@lowering("pd_op.cal_aux_loss")
def cal_aux_loss(
    gate_prob, dispatch_mask, tokens_mask=None, dispatch_tokens_mask=None, *, num_experts, use_group, moe_k, clip_min
):
    """(l_aux, seqlen, ce): seqlen the dispatched tokens (dispatch_tokens_mask's count, else tokens_mask's, else
    S / num_experts * E), at least clip_min; ce = each expert's count (dispatch_mask [E], or [S, E] summed) /
    seqlen; l_aux = num_experts * sum(ce * sum_s(gate_prob) / seqlen) (/ moe_k with use_group). Where both masks
    are given and the dispatch mask covers other tokens than gate_prob's rows (a global sequence), the forward
    is scaled by the dispatched count over max(sum(tokens_mask), clip_min) and the gradient is not
    (cal_aux_loss_kernel.cu and cal_aux_loss_grad_kernel.cu; Paddle's math_cal_aux_loss alike)."""
    p = gate_prob.astype(jnp.float32)
    tokens, experts = p.shape
    scale = None
    if dispatch_tokens_mask is not None:
        seqlen = jnp.sum(dispatch_tokens_mask.astype(jnp.float32))
        if tokens_mask is not None and tokens != dispatch_tokens_mask.shape[0]:
            scale = seqlen / jnp.maximum(jnp.sum(tokens_mask.astype(jnp.float32)), jnp.float32(clip_min))
    elif tokens_mask is not None:
        seqlen = jnp.sum(tokens_mask.astype(jnp.float32))
    else:
        seqlen = jnp.float32(tokens / num_experts * experts)
    seqlen = jnp.maximum(seqlen, jnp.float32(clip_min))
    counts = dispatch_mask.sum(0) if dispatch_mask.ndim == 2 else dispatch_mask
    ce = lax.stop_gradient(counts.astype(jnp.float32) / seqlen)
    loss = jnp.sum(ce * (jnp.sum(p, axis=0) / seqlen)) * num_experts
    if use_group:
        loss = loss / moe_k
    if scale is not None:
        loss = loss + lax.stop_gradient((scale - 1) * loss)  # NOTE: the forward scaled, the gradient not
    out = gate_prob.dtype
    return loss.astype(out), lax.stop_gradient(seqlen).astype(out), ce.astype(out)
