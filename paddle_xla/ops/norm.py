"""Normalisations: batch_norm (with running statistics), layer_norm, group_norm, instance_norm, p_norm.

Statistics Paddle returns beside the output (running/saved mean and variance) are not
differentiable in Paddle, so they leave these lowerings through lax.stop_gradient.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import declare, lowering
from .util import dim_product

_IGNORED = ("use_mkldnn", "fuse_with_relu", "is_test_mkldnn")


def compute_dtype(x):
    # NOTE: Paddle's GPU kernels keep half-precision statistics in float32; so do we.
    return jnp.float32 if x.dtype in (jnp.float16, jnp.bfloat16) else x.dtype


def _channel_axis(x, data_format):
    return x.ndim - 1 if data_format in ("NHWC", "NDHWC", "NLC") and x.ndim > 2 else 1


def _bcast(v, ndim, axis):
    shape = [1] * ndim
    shape[axis] = -1
    return v.reshape(shape)


# ---- batch norm -------------------------------------------------------------------------------
def batch_norm_impl(
    x, mean, variance, scale, bias, is_test, momentum, epsilon, data_format, use_global_stats, trainable_statistics
):
    axis = _channel_axis(x, data_format)
    c = x.shape[axis]
    ct = compute_dtype(x)
    xc = x.astype(ct)
    scale = jnp.ones((c,), ct) if scale is None else scale.astype(ct)
    bias = jnp.zeros((c,), ct) if bias is None else bias.astype(ct)
    running_mean, running_var = lax.stop_gradient(mean), lax.stop_gradient(variance)
    global_stats = (is_test and not trainable_statistics) or use_global_stats
    reduce_axes = tuple(i for i in range(x.ndim) if i != axis)
    if not global_stats and x.size == c:
        # NOTE: one value per channel ([1, C], [1, C, 1]): Paddle's kernels skip the normalisation and
        # copy x (scale and bias unused, so their gradients are 0), keep the running statistics and
        # save zeros; normalising would give 0 (or bias) instead.
        zeros = jnp.zeros((c,), ct)
        return (x, running_mean, running_var, zeros, zeros, None)
    if global_stats:
        use_mean, inv_std = running_mean.astype(ct), lax.rsqrt(running_var.astype(ct) + epsilon)
        mean_out, var_out = running_mean, running_var
        saved_mean, saved_inv_std = jnp.zeros((c,), ct), jnp.zeros((c,), ct)
    else:
        use_mean = jnp.mean(xc, axis=reduce_axes)
        batch_var = jnp.mean(jnp.square(xc - _bcast(use_mean, x.ndim, axis)), axis=reduce_axes)
        inv_std = lax.rsqrt(batch_var + epsilon)
        # NOTE: Paddle's convention: running = running * momentum + batch * (1 - momentum), with the
        # biased (population) batch variance; checked against paddle.nn.BatchNorm2D in eager.
        mean_out = (running_mean * momentum + use_mean.astype(mean.dtype) * (1 - momentum)).astype(mean.dtype)
        var_out = (running_var * momentum + batch_var.astype(variance.dtype) * (1 - momentum)).astype(variance.dtype)
        saved_mean, saved_inv_std = use_mean, inv_std
    y = _affine(xc, use_mean, inv_std, scale, bias, axis)
    if is_test and not global_stats:
        # NOTE: is_test with trainable_statistics normalises with batch statistics, but Paddle's
        # backward then treats the op as global-stats and differentiates with the running statistics,
        # already updated in place by this forward.
        m, v = lax.stop_gradient(mean_out).astype(ct), lax.stop_gradient(var_out).astype(ct)
        y_running = _affine(xc, m, lax.rsqrt(v + epsilon), scale, bias, axis)
        y = lax.stop_gradient(y) + (y_running - lax.stop_gradient(y_running))
    stats = [lax.stop_gradient(v) for v in (mean_out, var_out, saved_mean, saved_inv_std)]
    return (y.astype(x.dtype), *stats, None)


def _affine(x, mean, inv_std, scale, bias, axis):
    return (x - _bcast(mean, x.ndim, axis)) * _bcast(inv_std * scale, x.ndim, axis) + _bcast(bias, x.ndim, axis)


# NOTE: in Paddle AMP's black list, with no lowering here (multi-device batch norm).
declare("pd_op.sync_batch_norm_", where=__name__, amp="black")


@lowering("pd_op.batch_norm_", "pd_op.batch_norm", ignore=_IGNORED, amp="black", layout="data_format")
def batch_norm(
    x, mean, variance, scale, bias, *, is_test, momentum, epsilon, data_format, use_global_stats, trainable_statistics
):
    return batch_norm_impl(
        x, mean, variance, scale, bias, is_test, momentum, epsilon, data_format, use_global_stats, trainable_statistics
    )


# ---- layer / group / instance norm ------------------------------------------------------------------
@lowering("pd_op.layer_norm", ignore=_IGNORED, amp="black")
def layer_norm(x, scale, bias, *, epsilon, begin_norm_axis):
    # NOTE: normalise over the trailing axes in x's own shape. A reshape to [left, right] and back made
    # XLA:CPU recompute every earlier layer's residual stream inside later fusions (BERT-Base
    # inference 1.4 s -> 0.9 s without it, outputs bit-identical).
    ct = compute_dtype(x)
    axes = tuple(range(begin_norm_axis, x.ndim))
    left = dim_product(x.shape[:begin_norm_axis])
    xf = x.astype(ct)
    mean = jnp.mean(xf, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=axes, keepdims=True)
    y = (xf - mean) * lax.rsqrt(var + epsilon)
    normed_shape = x.shape[begin_norm_axis:]
    if scale is not None:
        y = y * scale.astype(ct).reshape(normed_shape)
    if bias is not None:
        y = y + bias.astype(ct).reshape(normed_shape)
    return (y.astype(x.dtype), lax.stop_gradient(mean.reshape(left)), lax.stop_gradient(var.reshape(left)))


@lowering("pd_op.group_norm", ignore=_IGNORED, amp="black")
def group_norm(x, scale, bias, *, epsilon, groups, data_format="NCHW"):
    axis = _channel_axis(x, data_format)
    ct = compute_dtype(x)
    xc = jnp.moveaxis(x.astype(ct), axis, 1)
    n, c = xc.shape[:2]
    xg = xc.reshape(n, groups, -1)
    mean = jnp.mean(xg, axis=2)
    var = jnp.mean(jnp.square(xg - mean[..., None]), axis=2)
    y = ((xg - mean[..., None]) * lax.rsqrt(var + epsilon)[..., None]).reshape(xc.shape)
    if scale is not None:
        y = y * _bcast(scale.astype(ct), y.ndim, 1)
    if bias is not None:
        y = y + _bcast(bias.astype(ct), y.ndim, 1)
    y = jnp.moveaxis(y, 1, axis).astype(x.dtype)
    return y, lax.stop_gradient(mean), lax.stop_gradient(var)


@lowering("pd_op.instance_norm", ignore=_IGNORED, amp="black")
def instance_norm(x, scale, bias, *, epsilon):
    ct = compute_dtype(x)
    n, c = x.shape[:2]
    xf = x.astype(ct).reshape(n, c, -1)
    mean = jnp.mean(xf, axis=2, keepdims=True)
    inv_std = lax.rsqrt(jnp.mean(jnp.square(xf - mean), axis=2, keepdims=True) + epsilon)
    y = (xf - mean) * inv_std
    if scale is not None:
        y = y * scale.astype(ct)[None, :, None]
    if bias is not None:
        y = y + bias.astype(ct)[None, :, None]
    # NOTE: the second and third outputs are Paddle's saved mean and saved inverse std, per (n, c).
    saved = [lax.stop_gradient(v.reshape(-1)) for v in (mean, inv_std)]
    return (y.reshape(x.shape).astype(x.dtype), *saved)


# ---- p-norm (F.normalize and friends) ------------------------------------------------------------
def _p_norm_fwd_value(x, porder, axis, keepdim):
    ax = jnp.abs(x)
    if porder == 0:
        return jnp.sum((x != 0).astype(x.dtype), axis=axis, keepdims=keepdim)
    if porder == np.inf:
        return jnp.max(ax, axis=axis, keepdims=keepdim)
    if porder == -np.inf:
        return jnp.min(ax, axis=axis, keepdims=keepdim)
    if porder == 2:
        return jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=keepdim))
    p = jnp.asarray(porder, x.dtype)
    return jnp.sum(ax**p, axis=axis, keepdims=keepdim) ** (1 / p)


def p_norm_impl(x, porder, axis, epsilon, keepdim):
    """Paddle's p_norm with Paddle's gradient: |x|^(p-1) sign(x) / (norm^(p-1) + eps), so a zero
    vector gets a zero gradient rather than NaN."""

    @jax.custom_vjp
    def f(x):
        return _p_norm_fwd_value(x, porder, axis, keepdim)

    def fwd(x):
        out = f(x)
        return out, (x, out)

    def bwd(res, g):
        x, out = res
        norm = out if keepdim else jnp.expand_dims(out, axis)
        g = g if keepdim else jnp.expand_dims(g, axis)
        if porder == 0:
            return (jnp.zeros_like(x),)
        if porder in (np.inf, -np.inf):
            return ((jnp.abs(x) == norm).astype(x.dtype) * jnp.sign(x) * g,)
        p1 = jnp.asarray(porder - 1.0, x.dtype)
        dx = jnp.abs(x) ** p1 / (norm**p1 + jnp.asarray(epsilon, x.dtype))
        return (dx * g * jnp.sign(x),)

    f.defvjp(fwd, bwd)
    return f(x)


@lowering("pd_op.p_norm", amp="black")
def p_norm(x, *, porder, axis, epsilon, keepdim, asvector):
    if asvector:
        out = p_norm_impl(x.reshape(-1), float(porder), 0, epsilon, False)
        return out.reshape((1,) * x.ndim) if keepdim else out
    return p_norm_impl(x, float(porder), axis % x.ndim if x.ndim else 0, epsilon, keepdim)


# ---- spectral norm ------------------------------------------------------------------------------
@lowering("pd_op.spectral_norm")
def spectral_norm(weight, u, v, *, dim=0, power_iters=1, eps=1e-12):
    w = jnp.moveaxis(weight, dim, 0)
    mat = w.reshape(w.shape[0], -1)
    u, v = u.astype(weight.dtype), v.astype(weight.dtype)
    m = lax.stop_gradient(mat)
    for _ in range(power_iters):
        v = m.T @ u
        v = v / (jnp.sqrt(jnp.sum(v * v)) + eps)
        u = m @ v
        u = u / (jnp.sqrt(jnp.sum(u * u)) + eps)
    # NOTE: as in Paddle's backward, the power-iteration vectors are constants for the gradient.
    u, v = lax.stop_gradient(u), lax.stop_gradient(v)
    sigma = u @ mat @ v
    return jnp.moveaxis((mat / sigma).reshape(w.shape), 0, dim)
