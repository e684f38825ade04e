"""Neural-network building blocks: embedding, dropout, softmax, pixel/channel shuffles, im2col
(unfold/fold), label smoothing, temporal shift, gumbel softmax. (affine_grid and grid_sample
live with the other resampling ops in interpolate.py.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import lowering
from .util import is_static, static_scalar


# ---- embedding ----------------------------------------------------------------------------------
@lowering("pd_op.embedding", amp="black")
def embedding(ids, weight, *, padding_idx=-1, sparse=False):
    # NOTE: `sparse` only picks Paddle's SelectedRows gradient; the values are the same.
    out = jnp.take(weight, ids, axis=0)
    if padding_idx is not None and padding_idx >= 0:
        # NOTE: Paddle writes zeros for padding rows, so that row gets no gradient either.
        out = jnp.where((ids == padding_idx)[..., None], jnp.zeros((), weight.dtype), out)
    return out


# ---- dropout ------------------------------------------------------------------------------------
def _keep_prob(p, dtype):
    if is_static(p):
        return 1.0 - float(static_scalar(p))
    # NOTE: p is a Scalar attribute in Paddle's backward: no gradient flows into it.
    return 1.0 - lax.stop_gradient(jnp.reshape(p, ())).astype(dtype)


@lowering("pd_op.dropout", kind="random", draws_unless="is_test")
def dropout(key, x, seed_tensor=None, p=0.5, *, is_test, mode, seed=0, fix_seed=False):
    # NOTE: seed/fix_seed pick Paddle's own generator; here randomness comes from the step key.
    keep = _keep_prob(p, x.dtype)
    upscale = mode == "upscale_in_train"
    if is_test:
        return (x if upscale else x * jnp.asarray(keep, x.dtype)), None
    mask = jax.random.uniform(key, x.shape, jnp.float32) < jnp.asarray(keep, jnp.float32)
    kept = jnp.where(mask, x, jnp.zeros((), x.dtype))
    if upscale:
        kept = kept * _inverse_keep(keep, x.dtype)
    return kept, mask.astype(jnp.uint8)


def _inverse_keep(keep, dtype):
    # NOTE: p == 1 drops everything; Paddle returns zeros instead of dividing by zero.
    if isinstance(keep, float):
        return jnp.asarray(0.0 if keep == 0 else 1.0 / keep, dtype)
    return jnp.where(keep > 0, 1 / jnp.where(keep > 0, keep, 1), 0).astype(dtype)


# ---- softmax ------------------------------------------------------------------------------------
@lowering("pd_op.softmax", ignore=("use_cudnn",), amp="black")
def softmax(x, *, axis=-1):
    if x.ndim == 0:
        return jnp.ones_like(x)  # NOTE: Paddle's kernel fills a 0-d output with 1 (even for NaN)
    return jax.nn.softmax(x, axis=axis)


@lowering("pd_op.log_softmax", amp="black")
def log_softmax(x, *, axis=-1):
    if x.ndim == 0:
        return jnp.zeros_like(x)  # NOTE: as softmax: Paddle's 0-d log_softmax is 0
    return jax.nn.log_softmax(x, axis=axis)


@lowering("pd_op.gumbel_softmax", kind="random")
def gumbel_softmax(key, x, *, temperature=1.0, hard=False, axis=-1):
    u = jax.random.uniform(key, x.shape, jnp.float32, minval=1e-10, maxval=1.0)
    gumbel = (-jnp.log(-jnp.log(u))).astype(x.dtype)
    soft = jax.nn.softmax((x + gumbel) / jnp.asarray(temperature, x.dtype), axis=axis)
    if not hard:
        # NOTE: Paddle 3.3's backward here omits the 1 / temperature factor (it is exact only at
        # temperature 1); autodiff keeps the true gradient.
        return soft
    # NOTE: the hard sample is a one-hot with zero gradient, as in Paddle (no straight-through).
    index = jnp.argmax(soft, axis=axis, keepdims=True)
    return lax.stop_gradient((lax.broadcasted_iota(jnp.int32, soft.shape, axis % x.ndim) == index).astype(x.dtype))


# ---- shuffles -------------------------------------------------------------------------------------
def _to_nchw(x, data_format):
    return jnp.transpose(x, (0, 3, 1, 2)) if data_format == "NHWC" else x


def _from_nchw(x, data_format):
    return jnp.transpose(x, (0, 2, 3, 1)) if data_format == "NHWC" else x


@lowering("pd_op.pixel_shuffle")
def pixel_shuffle(x, *, upscale_factor, data_format="NCHW"):
    r = upscale_factor
    x = _to_nchw(x, data_format)
    n, c, h, w = x.shape
    x = x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3)
    return _from_nchw(x.reshape(n, c // (r * r), h * r, w * r), data_format)


@lowering("pd_op.pixel_unshuffle")
def pixel_unshuffle(x, *, downscale_factor, data_format="NCHW"):
    r = downscale_factor
    x = _to_nchw(x, data_format)
    n, c, h, w = x.shape
    x = x.reshape(n, c, h // r, r, w // r, r).transpose(0, 1, 3, 5, 2, 4)
    return _from_nchw(x.reshape(n, c * r * r, h // r, w // r), data_format)


@lowering("pd_op.channel_shuffle")
def channel_shuffle(x, *, groups, data_format="NCHW"):
    x = _to_nchw(x, data_format)
    n, c, h, w = x.shape
    x = x.reshape(n, groups, c // groups, h, w).transpose(0, 2, 1, 3, 4).reshape(n, c, h, w)
    return _from_nchw(x, data_format)


@lowering("pd_op.temporal_shift")
def temporal_shift(x, *, seg_num, shift_ratio=0.25, data_format="NCHW"):
    x = _to_nchw(x, data_format)
    nt, c, h, w = x.shape
    v = x.reshape(nt // seg_num, seg_num, c, h, w)
    c1, c2 = int(c * shift_ratio), int(c * 2 * shift_ratio)
    zero = jnp.zeros_like(v[:, :1])
    # NOTE: the first c1 channels take frame t-1, the next c2-c1 take frame t+1, zeros at the ends.
    back = jnp.concatenate([zero, v[:, :-1]], axis=1)
    fwd = jnp.concatenate([v[:, 1:], zero], axis=1)
    out = jnp.concatenate([back[:, :, :c1], fwd[:, :, c1:c2], v[:, :, c2:]], axis=2)
    return _from_nchw(out.reshape(nt, c, h, w), data_format)


# ---- im2col -----------------------------------------------------------------------------------------
def _unfold(x, kernel_sizes, strides, paddings, dilations):
    top, left, bottom, right = paddings
    patches = lax.conv_general_dilated_patches(
        x,
        tuple(kernel_sizes),
        tuple(strides),
        [(top, bottom), (left, right)],
        rhs_dilation=tuple(dilations),
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
        precision=lax.Precision.HIGHEST,
    )
    n, ckk = patches.shape[:2]
    return patches.reshape(n, ckk, -1)


@lowering("pd_op.unfold")
def unfold(x, *, kernel_sizes, strides, paddings, dilations):
    return _unfold(x, kernel_sizes, strides, paddings, dilations)


@lowering("pd_op.fold")
def fold(x, *, output_sizes, kernel_sizes, strides, paddings, dilations):
    # NOTE: fold is the adjoint of unfold (col2im sums overlapping patches), so it is taken as the
    # linear transpose of our unfold.
    n, ckk, _ = x.shape
    c = ckk // int(np.prod(kernel_sizes))
    proto = jax.ShapeDtypeStruct((n, c, *output_sizes), x.dtype)
    transpose = jax.linear_transpose(lambda y: _unfold(y, kernel_sizes, strides, paddings, dilations), proto)
    return transpose(x)[0]


# ---- label smoothing ----------------------------------------------------------------------------------
@lowering("pd_op.label_smooth")
def label_smooth(label, prior_dist=None, *, epsilon):
    eps = jnp.asarray(epsilon, label.dtype)
    if prior_dist is None:
        return (1 - eps) * label + eps / label.shape[-1]
    # NOTE: Paddle's backward gives the prior no gradient.
    return (1 - eps) * label + eps * lax.stop_gradient(prior_dist).astype(label.dtype)


# ---- bilinear tensor product ----------------------------------------------------------------------
@lowering("pd_op.bilinear")
def bilinear(x, y, weight, bias=None):
    out = jnp.einsum("ni,kij,nj->nk", x, weight, y)
    return out if bias is None else out + bias.reshape(1, -1)
