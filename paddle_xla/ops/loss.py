"""Losses that Paddle runs as single ops: softmax cross entropy, NLL, BCE, sigmoid CE, Huber,
KL divergence, log loss, identity_loss, and CTC (warpctc).

Paddle's backward of these ops differentiates only the prediction input; labels, class weights and
side outputs (the softmax of cross_entropy_with_softmax, Huber's residual) get no gradient, so they
pass through lax.stop_gradient here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from .registry import declare, lowering

sg = lax.stop_gradient


def _take_label(x, label, axis):
    """x's value at the integer label along `axis` (label has size 1 there); index clipped."""
    idx = jnp.clip(label.astype(jnp.int32), 0, x.shape[axis] - 1)
    return jnp.take_along_axis(x, idx, axis=axis)


# NOTE: in Paddle AMP's black list, with no lowering here (a model-parallel loss).
declare("pd_op.margin_cross_entropy", where=__name__, amp="black")


@lowering("pd_op.cross_entropy_with_softmax", amp="black", inplace=True)
def cross_entropy_with_softmax(
    logits, label, *, soft_label, use_softmax, numeric_stable_mode=True, ignore_index=-100, axis=-1
):
    axis = axis % logits.ndim
    if use_softmax:
        log_p = jax.nn.log_softmax(logits, axis=axis)
        softmax = jnp.exp(log_p)
    else:
        # NOTE: without softmax the input already holds probabilities and is passed through.
        log_p, softmax = jnp.log(logits), logits
    if soft_label:
        label = sg(label).astype(log_p.dtype)
        loss = -jnp.sum(label * log_p, axis=axis, keepdims=True)
        if use_softmax:
            loss = _paddle_soft_grad(loss, logits, softmax, label, axis)
    else:
        loss = -_take_label(log_p, label, axis)
        loss = jnp.where(label == ignore_index, jnp.zeros((), loss.dtype), loss)
    return sg(softmax), loss


def _paddle_soft_grad(loss, logits, softmax, label, axis):
    """The loss value, with Paddle's soft-label gradient (softmax - label) * dloss.

    NOTE: that is the true gradient only when each label row sums to 1; Paddle uses it regardless,
    so a surrogate carries it: value from `loss`, gradient from logits . (softmax - label)."""
    surrogate = jnp.sum(logits * sg(softmax - label), axis=axis, keepdims=True)
    return sg(loss - surrogate) + surrogate


@lowering("pd_op.nll_loss", amp="black")
def nll_loss(x, label, weight=None, *, ignore_index=-100, reduction="mean"):
    # x: (N, C) or (N, C, d1, ...); label: (N,) or (N, d1, ...)
    w = jnp.ones((x.shape[1],), x.dtype) if weight is None else sg(weight).astype(x.dtype)
    valid = label != ignore_index
    safe = jnp.where(valid, label, 0).astype(jnp.int32)
    picked = jnp.take_along_axis(x, safe[:, None], axis=1)[:, 0]
    wl = jnp.where(valid, w[safe], jnp.zeros((), x.dtype))
    out = -picked * wl
    if reduction == "none":
        return out, jnp.zeros((), x.dtype)
    total = jnp.sum(wl)
    if reduction == "sum":
        return jnp.sum(out), total
    # NOTE: Paddle divides only by a nonzero total weight: with every label ignored (or weights
    # summing to 0) the mean is the plain sum, 0 rather than 0 / 0.
    return jnp.sum(out) / jnp.where(total == 0, jnp.ones((), x.dtype), total), total


@lowering("pd_op.bce_loss", amp="black")
def bce_loss(x, label):
    label = sg(label).astype(x.dtype)
    # NOTE: Paddle clamps each log at -100, so a saturated probability gives a finite loss.
    log_x = jnp.maximum(jnp.log(x), -100)
    log_1mx = jnp.maximum(jnp.log(1 - x), -100)
    loss = -(label * log_x + (1 - label) * log_1mx)
    # NOTE: Paddle's backward, (x - label) / max(x(1-x), 1e-12), stays finite at x = 0 or 1 where
    # autodiff of the clamped logs gives NaN; keep its gradient through a stop_gradient trick.
    grad = (x - label) / jnp.maximum(x * (1 - x), 1e-12)
    return sg(loss) + (x - sg(x)) * sg(grad)


@lowering("pd_op.sigmoid_cross_entropy_with_logits", amp="black")
def sigmoid_cross_entropy_with_logits(x, label, pos_weight=None, *, normalize=False, ignore_index=-100):
    label = sg(label).astype(x.dtype)
    softplus_neg = jnp.log1p(jnp.exp(-jnp.abs(x))) + jnp.maximum(-x, 0)  # log(1 + e^-x), stable
    if pos_weight is None:
        loss = (1 - label) * x + softplus_neg
    else:
        # NOTE: the operand is already the per-element log weight (pos_weight - 1) * label + 1
        # that F.binary_cross_entropy_with_logits computes.
        loss = (1 - label) * x + sg(pos_weight).astype(x.dtype) * softplus_neg
    # NOTE: Paddle compares the label truncated to int with ignore_index.
    loss = jnp.where(jnp.trunc(label) == ignore_index, jnp.zeros((), x.dtype), loss)
    if normalize:
        counted = jnp.abs(label - ignore_index) > 1e-6
        loss = loss / jnp.sum(counted).astype(x.dtype)
    return loss


@lowering("pd_op.huber_loss", amp="black")
def huber_loss(x, label, *, delta):
    residual = label - x
    a = jnp.abs(residual)
    d = jnp.asarray(delta, x.dtype)
    out = jnp.where(a <= d, 0.5 * residual * residual, d * (a - 0.5 * d))
    return out, sg(residual)


@lowering("pd_op.kldiv_loss", amp="black")
def kldiv_loss(x, label, *, reduction="mean", log_target=False):
    label = sg(label).astype(x.dtype)
    if log_target:
        out = jnp.exp(label) * (label - x)
    else:
        safe = jnp.where(label > 0, label, jnp.ones((), x.dtype))
        out = jnp.where(label > 0, label * (jnp.log(safe) - x), jnp.zeros((), x.dtype))
    if reduction == "batchmean":
        return jnp.sum(out) / x.shape[0] if x.ndim else jnp.sum(out)
    if reduction == "mean":
        return jnp.mean(out)
    if reduction == "sum":
        return jnp.sum(out)
    return out


@lowering("pd_op.log_loss")
def log_loss(x, label, *, epsilon):
    label = sg(label).astype(x.dtype)
    eps = jnp.asarray(epsilon, x.dtype)
    return -label * jnp.log(x + eps) - (1 - label) * jnp.log(1 - x + eps)


@lowering("pd_op.identity_loss")
def identity_loss(x, *, reduction=1):
    # NOTE: reduction is an int here: 0 sum, 1 mean, 2 none (the IPU loss marker).
    if reduction in (0, "sum"):
        return jnp.sum(x)
    if reduction in (1, "mean"):
        return jnp.mean(x)
    return x


# ---- CTC ------------------------------------------------------------------------------------------
_NEG = -1e30  # NOTE: a finite "log 0": -inf would give NaN gradients through logaddexp.


def _ctc_alphas_step(ext_lp_fn, skip_ok, alpha, t_inputs):
    lp_t, active = t_inputs
    ext_lp = ext_lp_fn(lp_t)  # (B, S)
    shift1 = jnp.pad(alpha[:, :-1], ((0, 0), (1, 0)), constant_values=_NEG)
    shift2 = jnp.pad(alpha[:, :-2], ((0, 0), (2, 0)), constant_values=_NEG)
    shift2 = jnp.where(skip_ok, shift2, _NEG)
    new = jnp.logaddexp(jnp.logaddexp(alpha, shift1), shift2) + ext_lp
    return jnp.where(active[:, None], new, alpha), None


def ctc_nll(logits, label, logits_length, labels_length, blank):
    """-log p(label | logits) per sequence; logits (T, B, C) unnormalised, label (B, L) padded."""
    t_max, b, _ = logits.shape
    ct = jnp.float64 if logits.dtype == jnp.float64 else jnp.float32
    lp = jax.nn.log_softmax(logits.astype(ct), axis=-1)
    lmax = label.shape[1]
    s = 2 * lmax + 1
    ext = jnp.full((b, s), blank, jnp.int32).at[:, 1::2].set(label.astype(jnp.int32))
    prev2 = jnp.pad(ext[:, :-2], ((0, 0), (2, 0)), constant_values=blank)
    skip_ok = (ext != blank) & (ext != prev2) & (jnp.arange(s) >= 2)
    gather = lambda lp_t: jnp.take_along_axis(lp_t, ext, axis=1)  # noqa: E731
    alpha0 = jnp.full((b, s), _NEG, ct)
    first = gather(lp[0])
    alpha0 = alpha0.at[:, 0].set(first[:, 0]).at[:, 1].set(jnp.where(lmax > 0, first[:, 1], _NEG))
    steps = jnp.arange(1, t_max)
    active = steps[:, None] < logits_length.reshape(1, b)
    step = lambda a, xs: _ctc_alphas_step(gather, skip_ok, a, xs)  # noqa: E731
    alpha, _ = lax.scan(step, alpha0, (lp[1:], active))
    end = 2 * labels_length.astype(jnp.int32)
    last = jnp.take_along_axis(alpha, end[:, None], axis=1)[:, 0]
    before = jnp.take_along_axis(alpha, jnp.maximum(end - 1, 0)[:, None], axis=1)[:, 0]
    before = jnp.where(end > 0, before, _NEG)
    return -jnp.logaddexp(last, before)


@lowering("pd_op.warpctc")
def warpctc(logits, label, logits_length=None, labels_length=None, *, blank=0, norm_by_times=False):
    t_max, b, _ = logits.shape
    if logits_length is None:
        logits_length = jnp.full((b,), t_max, jnp.int64)
    if labels_length is None:
        labels_length = jnp.sum(label != blank, axis=1)
    loss = ctc_nll(logits, label, logits_length, labels_length, blank)
    if norm_by_times:
        # NOTE: Paddle's norm_by_times scales only the gradient, by 1 / the sequence's length.
        scaled = loss / logits_length.astype(loss.dtype)
        loss = sg(loss) + (scaled - sg(scaled))
    return loss.astype(logits.dtype)[:, None], None
