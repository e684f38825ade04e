"""Paddle's fused LLM ops, as PaddleNLP / PaddleFormers code and its GPU-exported inference models emit them:
RMS and layer norms with a fused residual add, rotary position embedding, flash attention (padded, packed
and variable-length), bias + activation, dropout + add, and GEMM + bias + activation.

Only fused_rms_norm_quant and fused_bias_residual_layernorm have CPU kernels in Paddle; the rest follow
Paddle's GPU kernels (paddle/phi/kernels/fusion/gpu, paddle/phi/kernels/gpu/flash_attn_kernel.cu and the
PaddlePaddle/flash-attention fork), whose notes below say which detail comes from where. Statistics and RNG
state Paddle returns beside the outputs leave through lax.stop_gradient, as no Paddle gradient reads them.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import norm
from .nn import dropout as _dropout
from .registry import lowering
from .util import static_scalar

_FLASH_IGNORED = ("rng_name",)


# ---- shared pieces ----------------------------------------------------------------------------------
def quantize_int8(y, scale, round_type, max_bound, min_bound):
    """Paddle's QuantHelperFunc: max_bound * scale * y, rounded and clipped to [min_bound, max_bound]."""
    v = jnp.float32(max_bound * scale) * y.astype(jnp.float32)
    # NOTE: round_type 0 is rint (half to even); any other value is C's round (half away from zero).
    v = jnp.round(v) if round_type == 0 else jnp.sign(v) * jnp.floor(jnp.abs(v) + 0.5)
    return jnp.clip(v, min_bound, max_bound).astype(jnp.int8)


def _stat(v, shape):
    return lax.stop_gradient(v.reshape(shape).astype(jnp.float32))


def _rng_state():
    # NOTE: Paddle's (seed, offset) pair of its own generator; randomness here comes from the step key.
    return jnp.zeros((2,), jnp.int64)


# ---- RMS norms ----------------------------------------------------------------------------------------
def _rms(h, axes, epsilon):
    inv = lax.rsqrt(jnp.mean(jnp.square(h), axis=axes, keepdims=True) + jnp.asarray(epsilon, h.dtype))
    return h * inv, inv


@lowering("pd_op.fused_rms_norm_ext")
def fused_rms_norm_ext(x, scale, *, epsilon):
    ct = norm.compute_dtype(x)
    y, inv = _rms(x.astype(ct), (-1,), epsilon)
    # NOTE: RMSLnFwd allocates y in scale's dtype and invvar as one float32 per row ([rows], 1-D).
    y = (y * scale.astype(ct)).astype(scale.dtype)
    return y, _stat(inv, (-1,))


@lowering("pd_op.rms_norm")
def rms_norm(x, scale, *, normalized_shape, epsilon):
    axis = x.ndim - len(normalized_shape)
    ct = norm.compute_dtype(x)
    y, inv = _rms(x.astype(ct), tuple(range(axis, x.ndim)), epsilon)
    if scale is not None:
        y = y * scale.astype(ct).reshape(x.shape[axis:])
    return y.astype(x.dtype), _stat(inv, x.shape[:axis])


@lowering("pd_op.fused_rms_norm_quant")
def fused_rms_norm_quant(
    x,
    bias,
    residual,
    norm_weight,
    norm_bias,
    *,
    epsilon,
    begin_norm_axis,
    quant_scale,
    quant_round_type,
    quant_max_bound,
    quant_min_bound,
):
    """paddle.incubate.nn.functional.fused_rms_norm: RMSNorm(x + bias + residual) * weight + norm_bias."""
    residual_out = None
    h = x
    if residual is not None:
        # NOTE: bias joins only together with a residual (Paddle's CPU and GPU kernels ignore it alone).
        h = x + residual if bias is None else x + bias + residual
        residual_out = h
    ct = norm.compute_dtype(x)
    normed_shape = x.shape[begin_norm_axis:]
    y, inv = _rms(h.astype(ct), tuple(range(begin_norm_axis, x.ndim)), epsilon)
    if norm_weight is not None:
        y = y * norm_weight.astype(ct).reshape(normed_shape)
    if norm_bias is not None:
        y = y + norm_bias.astype(ct).reshape(normed_shape)
    out = (
        quantize_int8(y, quant_scale, quant_round_type, quant_max_bound, quant_min_bound)
        if quant_scale > 0
        else y.astype(x.dtype)
    )
    return out, residual_out, _stat(inv, x.shape[:begin_norm_axis])


# ---- layer norm with residual (paddle.incubate.nn.functional.fused_layer_norm) --------------------------
@lowering("pd_op.fused_bias_residual_layernorm")
def fused_bias_residual_layernorm(
    x,
    bias,
    residual,
    norm_weight,
    norm_bias,
    *,
    epsilon,
    residual_alpha,
    begin_norm_axis,
    quant_scale,
    quant_round_type,
    quant_max_bound,
    quant_min_bound,
):
    h = x
    if residual is not None:
        # NOTE: as FusedLayerNormKernel: bias joins only with a residual, which is scaled by residual_alpha.
        h = x + jnp.asarray(residual_alpha, x.dtype) * residual
        h = h if bias is None else h + bias
    ct = norm.compute_dtype(x)
    axes = tuple(range(begin_norm_axis, x.ndim))
    normed_shape = x.shape[begin_norm_axis:]
    hf = h.astype(ct)
    mean = jnp.mean(hf, axis=axes, keepdims=True)
    inv_std = lax.rsqrt(jnp.mean(jnp.square(hf - mean), axis=axes, keepdims=True) + jnp.asarray(epsilon, ct))
    y = (hf - mean) * inv_std
    if norm_weight is not None:
        y = y * norm_weight.astype(ct).reshape(normed_shape)
    if norm_bias is not None:
        y = y + norm_bias.astype(ct).reshape(normed_shape)
    if residual is not None and norm_weight is None and norm_bias is None:
        # NOTE: the GPU kernel's plain fused add (ResidualDropoutBias). With no residual either it normalises
        # (AttnLayerNorm without affine), where Paddle's CPU kernel returns x unchanged.
        out = h
    elif quant_scale > 0:
        out = quantize_int8(y, quant_scale, quant_round_type, quant_max_bound, quant_min_bound)
    else:
        out = y.astype(x.dtype)
    # NOTE: the fourth output holds 1 / sqrt(variance + epsilon), as Paddle's CPU kernel returns it.
    return out, h, _stat(mean, (-1,)), _stat(inv_std, (-1,))


# ---- rotary position embedding ------------------------------------------------------------------------
def _rope_tables(sin, cos, position_ids, seq_len, head_dim, base):
    """sin and cos per (batch or 1, position, 1, head_dim), in float32."""
    pos = (jnp.arange(seq_len)[None, :] if position_ids is None else position_ids).astype(jnp.int32)
    if sin is None or cos is None:
        # NOTE: set_cin_cos_shared_mem: dims 2i and 2i + 1 share the frequency base^(-2i / head_dim).
        exponent = (np.arange(head_dim) // 2 * 2).astype(np.float32) / np.float32(head_dim)
        inv_freq = jnp.asarray(np.float32(1.0) / np.power(np.float32(base), exponent))
        angle = pos.astype(jnp.float32)[..., None] * inv_freq
        return jnp.sin(angle)[:, :, None, :], jnp.cos(angle)[:, :, None, :]
    return _table_rows(sin, pos, head_dim), _table_rows(cos, pos, head_dim)


def _table_rows(table, pos, head_dim):
    # NOTE: the kernel reads sin[pos * head_dim + i]: any [.., positions, .., head_dim] table, by rows.
    return jnp.take(table.reshape(-1, head_dim).astype(jnp.float32), pos, axis=0)[:, :, None, :]


def _rotated(x, every_two):
    if every_two:
        pairs = x.reshape(x.shape[:-1] + (x.shape[-1] // 2, 2))
        return jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape)
    first, second = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([-second, first], axis=-1)


@lowering("pd_op.fused_rotary_position_embedding")
def fused_rotary_position_embedding(
    q, k, v, sin, cos, position_ids, *, use_neox_rotary_style=True, time_major=False, rotary_emb_base=10000.0
):
    # NOTE: Paddle's naming is the reverse of HuggingFace's: use_neox_rotary_style=True rotates adjacent pairs
    # (x[2i], x[2i+1]); False rotates the halves (x[i], x[i + d/2]) (FusedRopeKernelImpl).
    seq_axis = 0 if time_major else 1
    head_dim = q.shape[-1]
    s, c = _rope_tables(sin, cos, position_ids, q.shape[seq_axis], head_dim, rotary_emb_base)
    if time_major:
        s, c = jnp.swapaxes(s, 0, 1), jnp.swapaxes(c, 0, 1)

    def rotate(x):
        if x is None:
            return None
        xf = x.astype(norm.compute_dtype(x))
        return (xf * c + _rotated(xf, use_neox_rotary_style) * s).astype(x.dtype)

    return rotate(q), rotate(k), rotate(v)


# ---- flash attention ----------------------------------------------------------------------------------
def _mask_4d(mask):
    # NOTE: GetAttnMaskDims folds every dimension before the last three into the first.
    return mask.reshape((-1,) + mask.shape[-3:])


def _round128(n):
    return (n + 127) // 128 * 128


def _attention(key, q, k, v, *, scale, causal, bias=None, allowed=None, dropout=0.0):
    """softmax(q k^T * scale + bias) v over [batch, seq, heads, dim] operands, half ones summed in float32.

    k and v may have fewer heads: query head j reads key head j // (heads / key_heads), as flash-attention.
    `allowed` (bool, broadcast to [b, h, sq, sk]) masks scores out. Returns the output, the probabilities
    [b, h, sq, sk] and the log-sum-exp [b, h, sq]."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    group = h // hk
    acc = norm.compute_dtype(q)
    qg = q.reshape(b, sq, hk, group, d)
    scores = jnp.einsum("bqhgd,bkhd->bhgqk", qg, k, preferred_element_type=acc)
    scores = scores.reshape(b, h, sq, sk) * jnp.asarray(scale, acc)
    if bias is not None:
        scores = scores + bias.astype(acc)
    if causal:
        # NOTE: the Paddle fork's apply_mask_causal keeps key j <= query i, aligned at the top left even when
        # sq != sk (upstream flash-attention >= 2.1 aligns at the bottom right).
        keep = jnp.arange(sk)[None, :] <= jnp.arange(sq)[:, None]
        allowed = keep if allowed is None else allowed & keep
    if allowed is not None:
        scores = jnp.where(allowed, scores, -jnp.inf)
    top = lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True))
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    weights = jnp.exp(scores - top)
    total = jnp.sum(weights, axis=-1, keepdims=True)
    # NOTE: a row with every key masked gives a zero output and an infinite lse, as flash-attention does.
    probs = weights / jnp.where(total > 0, total, 1.0)
    lse = jnp.where(total > 0, top + jnp.log(jnp.where(total > 0, total, 1.0)), jnp.inf)[..., 0]
    used = probs
    if dropout > 0.0:
        keep_mask = jax.random.uniform(key, probs.shape, jnp.float32) >= jnp.float32(dropout)
        used = jnp.where(keep_mask, probs / jnp.asarray(1.0 - dropout, acc), 0.0)
    used = used.reshape(b, hk, group, sq, sk).astype(v.dtype)
    out = jnp.einsum("bhgqk,bkhd->bqhgd", used, v, preferred_element_type=acc)
    return out.reshape(b, sq, h, v.shape[-1]).astype(q.dtype), probs, lse


def _padded_probs(probs, dtype):
    # NOTE: Paddle's softmax output has both sequence axes rounded up to 128 (FlashAttnInferMeta); it holds
    # data only with return_softmax (dropout > 0), so the probabilities are given without the dropout.
    pads = [(0, 0)] * (probs.ndim - 2) + [(0, _round128(n) - n) for n in probs.shape[-2:]]
    return lax.stop_gradient(jnp.pad(probs, pads).astype(dtype))


def _flash_dropout(dropout, is_test):
    # NOTE: FlashAttnFwdParamsV2 drops nothing under is_test, whatever the dropout attribute says.
    return 0.0 if is_test else float(dropout)


@lowering("pd_op.flash_attn", kind="random", ignore=_FLASH_IGNORED)
def flash_attn(
    key,
    q,
    k,
    v,
    fixed_seed_offset=None,
    attn_mask=None,
    *,
    dropout=0.0,
    causal=False,
    return_softmax=False,
    is_test=False,
):
    # NOTE: attn_mask is additive (the fork adds mask * unscale to the unscaled q k^T); scale is 1/sqrt(dim).
    bias = None if attn_mask is None else _mask_4d(attn_mask)
    out, probs, lse = _attention(
        key,
        q,
        k,
        v,
        scale=1.0 / math.sqrt(q.shape[-1]),
        causal=causal,
        bias=bias,
        dropout=_flash_dropout(dropout, is_test),
    )
    return out, _padded_probs(probs, q.dtype), lax.stop_gradient(lse), _rng_state()


@lowering("pd_op.flash_attn_qkvpacked", kind="random", ignore=_FLASH_IGNORED)
def flash_attn_qkvpacked(
    key, qkv, fixed_seed_offset=None, attn_mask=None, *, dropout=0.0, causal=False, return_softmax=False, is_test=False
):
    # NOTE: qkv is [batch, seq, heads / key_heads + 2, key_heads, dim]; the query heads flatten the first two
    # (FlashAttnQKVPackedInferMeta), so query head j still reads key head j // (heads / key_heads).
    b, s, groups, hk, d = qkv.shape
    q = qkv[:, :, : groups - 2].reshape(b, s, (groups - 2) * hk, d)
    return flash_attn(
        key,
        q,
        qkv[:, :, groups - 2],
        qkv[:, :, groups - 1],
        fixed_seed_offset,
        attn_mask,
        dropout=dropout,
        causal=causal,
        return_softmax=return_softmax,
        is_test=is_test,
    )


def _token_segments(cu_seqlens, total):
    """Each of `total` packed tokens' sequence (len(cu_seqlens) - 1 past the last one) and position in it."""
    cu = cu_seqlens.astype(jnp.int32)
    t = jnp.arange(total, dtype=jnp.int32)
    seg = jnp.searchsorted(cu[1:], t, side="right").astype(jnp.int32)
    start = jnp.take(cu, jnp.minimum(seg, cu.shape[0] - 2))
    return seg, t - start


@lowering("pd_op.flash_attn_unpadded", kind="random", ignore=_FLASH_IGNORED)
def flash_attn_unpadded(
    key,
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    fixed_seed_offset=None,
    attn_mask=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    *,
    scale,
    dropout=0.0,
    causal=False,
    return_softmax=False,
    is_test=False,
):
    """Variable-length attention over packed [total_tokens, heads, dim] operands, sequence i holding tokens
    cu_seqlens[i]:cu_seqlens[i + 1]. NOTE: computed as one masked [total_q, total_k] attention (static
    shapes), so its cost grows with the square of the whole batch's token count."""
    batch = cu_seqlens_q.shape[0] - 1
    seg_q, pos_q = _token_segments(cu_seqlens_q, q.shape[0])
    seg_k, pos_k = _token_segments(cu_seqlens_k, k.shape[0])
    allowed = (seg_q[:, None] == seg_k[None, :]) & (seg_q[:, None] < batch)
    if causal:
        # NOTE: causal within each sequence, aligned at its first tokens as in the padded case.
        allowed = allowed & (pos_k[None, :] <= pos_q[:, None])
    bias = None
    if attn_mask is not None:
        m = _mask_4d(attn_mask)
        sq, sk = int(static_scalar(max_seqlen_q)), int(static_scalar(max_seqlen_k))
        rows = jnp.minimum(seg_q, m.shape[0] - 1) if m.shape[0] > 1 else jnp.zeros_like(seg_q)
        bias = m[rows[:, None], :, jnp.clip(pos_q, 0, sq - 1)[:, None], jnp.clip(pos_k, 0, sk - 1)[None, :]]
        bias = jnp.moveaxis(bias, -1, 0)[None]
    out, probs, lse = _attention(
        key,
        q[None],
        k[None],
        v[None],
        scale=scale,
        causal=False,
        bias=bias,
        allowed=allowed[None, None],
        dropout=_flash_dropout(dropout, is_test),
    )
    # NOTE: softmax_lse is unpadded, [heads, total_q], and softmax [heads, total_q, total_k] rounded to 128.
    return out[0], _padded_probs(probs[0], q.dtype), lax.stop_gradient(lse[0]), _rng_state()


# ---- bias + activation --------------------------------------------------------------------------------
def _gelu_erf(x):
    return 0.5 * x * (1.0 + lax.erf(x * jnp.asarray(0.7071067811865476, x.dtype)))


_ACTS = {"gelu": _gelu_erf, "relu": jax.nn.relu, "swiglu": jax.nn.silu, "geglu": _gelu_erf}
_COMPUTE_DTYPES = {"bf16": jnp.bfloat16, "fp16": jnp.float16, "fp32": jnp.float32}


@lowering("pd_op.fused_bias_act")
def fused_bias_act(
    x,
    bias=None,
    dequant_scales=None,
    shift=None,
    smooth=None,
    *,
    act_method="gelu",
    compute_dtype="default",
    quant_scale=-1.0,
    quant_round_type=1,
    quant_max_bound=127.0,
    quant_min_bound=-127.0,
):
    if act_method not in _ACTS:
        raise ValueError(f"fused_bias_act: act_method {act_method!r} is not one of Paddle's {sorted(_ACTS)}")
    dtype = x.dtype
    if x.dtype == jnp.int32:
        # NOTE: an int32 GEMM result, dequantised per column (DequantLoad) into the compute_dtype.
        dtype = _COMPUTE_DTYPES[compute_dtype]
        x = (x.astype(jnp.float32) * dequant_scales.astype(jnp.float32)).astype(dtype)
    h = x.astype(jnp.float32) if bias is None else x.astype(jnp.float32) + bias.astype(jnp.float32)
    act = _ACTS[act_method]
    if act_method in ("swiglu", "geglu"):
        # NOTE: ActFFNGlu: act(first half of the last axis) * second half, each half with its own bias.
        gate, up = jnp.split(h, 2, axis=-1)
        y = act(gate) * up
    else:
        y = act(h)
    if shift is not None:
        y = (y + shift.astype(jnp.float32)) * smooth.astype(jnp.float32)
    if quant_scale > 0:
        return quantize_int8(y, quant_scale, quant_round_type, quant_max_bound, quant_min_bound)
    return y.astype(dtype)


# ---- dropout + add ------------------------------------------------------------------------------------
@lowering("pd_op.fused_dropout_add", kind="random")
def fused_dropout_add(key, x, y, seed_tensor=None, *, p, is_test, mode, seed=0, fix_seed=False):
    dropped, _ = _dropout(key, x, None, p, is_test=is_test, mode=mode)
    return dropped + y, _rng_state()


# ---- GEMM epilogue (fused_linear, fused_matmul_bias, fused_linear_activation) ---------------------------
def _gelu_tanh(x):
    return jax.nn.gelu(x, approximate=True)


_EPILOGUES = {"none": lambda x: x, "relu": jax.nn.relu, "gelu": _gelu_tanh}


@lowering("pd_op.fused_gemm_epilogue")
def fused_gemm_epilogue(x, y, bias, *, trans_x=False, trans_y=False, activation="none"):
    # NOTE: cuBLASLt's GELU epilogue is the tanh approximation (Paddle's fused_gemm_epilogue tests use it).
    if activation not in _EPILOGUES:
        raise ValueError(f"fused_gemm_epilogue: activation {activation!r} is not one of {sorted(_EPILOGUES)}")
    a = jnp.swapaxes(x, -1, -2) if trans_x else x
    w = y.T if trans_y else y
    pre = jnp.matmul(a, w) + bias
    # NOTE: reserve_space is cuBLASLt's auxiliary output (relu's mask, gelu's input) that only Paddle's
    # backward reads; the pre-activation stands in for it.
    reserve = None if activation == "none" else lax.stop_gradient(pre)
    return _EPILOGUES[activation](pre), reserve
