"""Activation functions. Where Paddle's gradient at a kink differs from the plain derivative, the
forward is written as a `where` whose branches give Paddle's gradient (its *GradFunctor masks)."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
from jax import lax

from .registry import lowering


def _passing(x, mask, fallback):
    """x where mask holds (gradient 1), else the constant fallback (gradient 0)."""
    return jnp.where(mask, x, lax.stop_gradient(fallback))


def _c(v, x):
    return jnp.asarray(v, x.dtype)


def _at_most(x, t):
    """min(x, t) with gradient 1 at x == t (jnp.minimum would halve it), to keep an exp in the
    branch a `where` discards from overflowing into a NaN gradient."""
    return jnp.where(x > t, t, x)


@lowering("pd_op.relu", layout="unary", inplace=True)
def relu(x):
    return _passing(x, x > 0, jnp.zeros_like(x))


@lowering("pd_op.relu6", layout="unary")
def relu6(x):
    # NOTE: gradient where 0 < out < 6 (Relu6GradFunctor).
    return _passing(x, (x > 0) & (x < 6), jnp.clip(x, 0, 6))


@lowering("pd_op.hardtanh")
def hardtanh(x, *, t_min, t_max):
    lo, hi = _c(t_min, x), _c(t_max, x)
    return _passing(x, (x > lo) & (x < hi), jnp.clip(x, lo, hi))


@lowering("pd_op.leaky_relu", layout="unary")
def leaky_relu(x, *, negative_slope):
    # NOTE: slope 1 at x == 0 (LeakyReluGradFunctor uses x >= 0).
    return jnp.where(x >= 0, x, _c(negative_slope, x) * x)


def _nan_or(x, fallback):
    """fallback, but NaN where x is NaN (gradient 0): Paddle's shrink functors compute a dropped branch as
    x * 0, so a NaN input stays NaN where a plain `where` would give the fallback."""
    return jnp.where(jnp.isnan(x), lax.stop_gradient(x), fallback)


@lowering("pd_op.thresholded_relu")
def thresholded_relu(x, *, threshold, value=0.0):
    return _passing(x, x > _c(threshold, x), _nan_or(x, jnp.full_like(x, value)))


@lowering("pd_op.hardshrink")
def hardshrink(x, *, threshold):
    t = _c(threshold, x)
    return _passing(x, (x <= -t) | (x >= t), _nan_or(x, jnp.zeros_like(x)))


@lowering("pd_op.softshrink")
def softshrink(x, *, threshold):
    t = _c(threshold, x)
    return jnp.where(x > t, x - t, jnp.where(x < -t, x + t, _nan_or(x, lax.stop_gradient(jnp.zeros_like(x)))))


@lowering("pd_op.sigmoid", layout="unary")
def sigmoid(x):
    return jax.nn.sigmoid(x)


@lowering("pd_op.logsigmoid")
def logsigmoid(x):
    return jax.nn.log_sigmoid(x)


@lowering("pd_op.silu", "pd_op.swish", layout="unary")
def silu(x):
    return x * jax.nn.sigmoid(x)


@lowering("pd_op.gelu", layout="unary")
def gelu(x, *, approximate):
    return jax.nn.gelu(x, approximate=bool(approximate))


def gelu_by_erf(x, *, approximate):
    """GELU as Paddle's CPU kernel writes it, 0.5 x (1 + erf(x / sqrt 2)): 2.4x cheaper on XLA:CPU
    than jax.nn.gelu's erfc form, whose XLA expansion needs an exp and a select. Its error is
    absolute (up to 1.4e-6 from XLA's erf, where x < -3), so the float32 lowering keeps the erfc
    form (relative 1e-4 of Paddle's output); a half-precision program, whose next op rounds the
    output to half anyway, takes this one."""
    if approximate:
        return jax.nn.gelu(x, approximate=True)
    return 0.5 * x * (1 + lax.erf(x * _c(0.7071067811865476, x)))


@lowering("pd_op.hardswish", layout="unary")
def hardswish(x):
    # NOTE: Paddle's fixed threshold 6, scale 6, offset 3; gradient 1 once x + 3 >= 6.
    t = x + 3
    gate = jnp.where(t >= 6, x, x * jnp.clip(t, 0, 6) / 6)
    return jnp.where(t > 0, gate, lax.stop_gradient(jnp.zeros_like(x)))


@lowering("pd_op.hardsigmoid", layout="unary")
def hardsigmoid(x, *, slope, offset):
    y = x * _c(slope, x) + _c(offset, x)
    return _passing(y, (y > 0) & (y < 1), jnp.clip(y, 0, 1))


@lowering("pd_op.elu", layout="unary")
def elu(x, *, alpha):
    return jnp.where(x > 0, x, _c(alpha, x) * jnp.expm1(_at_most(x, 0)))


@lowering("pd_op.selu")
def selu(x, *, scale, alpha):
    s, a = _c(scale, x), _c(alpha, x)
    return s * jnp.where(x > 0, x, a * jnp.expm1(_at_most(x, 0)))


@lowering("pd_op.celu")
def celu(x, *, alpha):
    a = _c(alpha, x)
    return jnp.where(x > 0, x, a * jnp.expm1(_at_most(x, 0) / a))


@lowering("pd_op.softplus", amp="black")
def softplus(x, *, beta, threshold):
    b, t = _c(beta, x), _c(threshold, x)
    xb = x * b
    soft = jnp.log1p(jnp.exp(_at_most(xb, t))) / b
    return jnp.where(xb > t, x, soft)


@lowering("pd_op.softsign")
def softsign(x):
    return x / (1 + jnp.abs(x))


@lowering("pd_op.tanh_shrink")
def tanh_shrink(x):
    return x - jnp.tanh(x)


@lowering("pd_op.stanh")
def stanh(x, *, scale_a, scale_b):
    return _c(scale_b, x) * jnp.tanh(_c(scale_a, x) * x)


def _mish(x, **attrs):
    t = _c(attrs.get("lambda", 20.0), x)
    sp = jnp.where(x > t, x, jnp.log1p(jnp.exp(_at_most(x, t))))
    return x * jnp.tanh(sp)


def _keyword_attr(fn, name, default):
    """Declare a keyword-only attribute whose name is a Python keyword (mish's `lambda`).

    NOTE: no Python function can name a parameter `lambda`; the registry reads the accepted
    attributes from the signature, so the signature is set by hand (Parameter checks the name)."""
    p = inspect.Parameter("placeholder", inspect.Parameter.KEYWORD_ONLY, default=default)
    p._name = name
    x = inspect.Parameter("x", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    fn.__signature__ = inspect.Signature([x, p])
    return fn


lowering("pd_op.mish", layout="unary")(_keyword_attr(_mish, "lambda", 20.0))


@lowering("pd_op.prelu")
def prelu(x, alpha, *, data_format="NCHW", mode="all"):
    if mode == "channel":
        axis = 1 if data_format.startswith("NC") else x.ndim - 1
        shape = [1] * x.ndim
        shape[axis] = -1
        alpha = alpha.reshape(shape)
    elif mode == "element":
        alpha = alpha.reshape((1,) + x.shape[1:])
    else:
        alpha = alpha.reshape(())
    return jnp.where(x > 0, x, alpha.astype(x.dtype) * x)


@lowering("pd_op.maxout")
def maxout(x, *, groups, axis=1):
    axis = axis % x.ndim
    c = x.shape[axis]
    shape = x.shape[:axis] + (c // groups, groups) + x.shape[axis + 1 :]
    g = x.reshape(shape)
    # NOTE: the gradient goes to the first maximum of each group, as Paddle's MaxOutGradFunctor.
    idx = jnp.argmax(g, axis=axis + 1, keepdims=True)
    return jnp.take_along_axis(g, idx, axis=axis + 1).squeeze(axis + 1)


@lowering("pd_op.rrelu", kind="random")
def rrelu(key, x, *, lower, upper, is_test):
    if is_test:
        slope = jnp.full_like(x, (lower + upper) / 2)
    else:
        slope = jax.random.uniform(key, x.shape, x.dtype, lower, upper)
    noise = jnp.where(x >= 0, jnp.ones_like(x), slope)
    return jnp.where(x >= 0, x, slope * x), lax.stop_gradient(noise)


@lowering("pd_op.swiglu")
def swiglu(x, y=None):
    # NOTE: with no y, x holds both halves along its last axis.
    if y is None:
        x, y = jnp.split(x, 2, axis=-1)
    return x * jax.nn.sigmoid(x) * y
