"""Elementwise math of one tensor: exponentials, logs, roots, trigonometry, special functions."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
from jax import lax

from .registry import lowering


def _floating(x):
    # NOTE: Paddle's float-valued math (exp, sin, ...) takes integer tensors and answers in float32.
    return x if jnp.issubdtype(x.dtype, jnp.inexact) else x.astype(jnp.float32)


def _float_unary(name, fn, **declared):
    @lowering(name, **declared)
    def unary(x):
        return fn(_floating(x))

    unary.__name__ = name.split(".")[-1]
    return unary


for _name, _fn in {
    "sqrt": jnp.sqrt,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "asin": jnp.arcsin,
    "acos": jnp.arccos,
    "atan": jnp.arctan,
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "asinh": jnp.arcsinh,
    "acosh": jnp.arccosh,
    "atanh": jnp.arctanh,
    "erf": lax.erf,
    "i0": jsp.i0,
    "i0e": jsp.i0e,
    "i1": jsp.i1,
    "i1e": jsp.i1e,
}.items():
    _float_unary(f"pd_op.{_name}", _fn)


# ---- special functions at the edges of their domains, as Paddle's kernels answer there ----------
@jax.custom_jvp
def _erfinv(x):
    # NOTE: outside [-1, 1] (infinities included) Paddle gives copysign(inf, x); lax.erf_inv gives NaN.
    return jnp.where(jnp.abs(x) > 1, jnp.copysign(jnp.asarray(jnp.inf, x.dtype), x), lax.erf_inv(x))


@_erfinv.defjvp
def _erfinv_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    y = _erfinv(x)
    return y, t * (math.sqrt(math.pi) / 2) * jnp.exp(y * y)  # Paddle's gradient: inf out there


@jax.custom_jvp
def _digamma(x):
    # NOTE: the pole at 0 is signed: Paddle gives -inf at +0 and +inf at -0; lax.digamma gives NaN.
    return jnp.where(x == 0, -jnp.copysign(jnp.asarray(jnp.inf, x.dtype), x), lax.digamma(x))


_digamma.defjvp(
    lambda primals, tangents: (
        _digamma(primals[0]),
        tangents[0] * lax.polygamma(jnp.ones((), primals[0].dtype), primals[0]),
    )
)


@jax.custom_jvp
def _lgamma(x):
    return lax.lgamma(x)


# NOTE: lgamma's gradient is digamma, signed infinities at +-0 included.
_lgamma.defjvp(lambda primals, tangents: (_lgamma(primals[0]), tangents[0] * _digamma(primals[0])))

for _name, _fn in {"erfinv": _erfinv, "digamma": _digamma, "lgamma": _lgamma, "gammaln": _lgamma}.items():
    _float_unary(f"pd_op.{_name}", _fn)
# NOTE: in Paddle AMP's black list (they run in float32 under O1).
for _name, _fn in {
    "exp": jnp.exp,
    "expm1": jnp.expm1,
    "log": jnp.log,
    "log1p": jnp.log1p,
    "log2": jnp.log2,
    "log10": jnp.log10,
    "rsqrt": lax.rsqrt,
    "reciprocal": jnp.reciprocal,
}.items():
    _float_unary(f"pd_op.{_name}", _fn, amp="black")
_float_unary("pd_op.tanh", jnp.tanh, layout="unary")


@lowering("pd_op.abs")
def abs_(x):
    if not jnp.issubdtype(x.dtype, jnp.inexact) or jnp.issubdtype(x.dtype, jnp.complexfloating):
        return jnp.abs(x)  # a complex input gives its magnitude, as Paddle's does
    # NOTE: d|x|/dx at 0 is 0 in Paddle (sign(x)); jnp.abs's is 1 there.
    return jnp.where(x > 0, x, jnp.where(x < 0, -x, lax.stop_gradient(jnp.abs(x))))


@lowering("pd_op.square", amp="black")
def square(x):
    return x * x


@lowering("pd_op.floor")
def floor(x):
    return x if not jnp.issubdtype(x.dtype, jnp.inexact) else jnp.floor(x)


@lowering("pd_op.ceil")
def ceil(x):
    return x if not jnp.issubdtype(x.dtype, jnp.inexact) else jnp.ceil(x)


@lowering("pd_op.trunc")
def trunc(x):
    return x if not jnp.issubdtype(x.dtype, jnp.inexact) else lax.stop_gradient(jnp.trunc(x))


@lowering("pd_op.round")
def round_(x, *, decimals=0):
    # NOTE: rint (half to even), with the power of ten applied in x's own dtype, as Paddle's kernel.
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return x
    x = lax.stop_gradient(x)
    if decimals == 0:
        return jnp.round(x)
    p = jnp.asarray(10.0 ** abs(decimals), x.dtype)
    return jnp.round(x * p) / p if decimals > 0 else jnp.round(x / p) * p


@lowering("pd_op.isnan")
def isnan(x):
    return jnp.isnan(x)


@lowering("pd_op.isinf")
def isinf(x):
    return jnp.isinf(x)


@lowering("pd_op.isfinite")
def isfinite(x):
    return jnp.isfinite(x)


@lowering("pd_op.logit")
def logit(x, *, eps=0.0):
    x = _floating(x)
    if eps:
        # NOTE: Paddle clamps into [eps, 1-eps] and gives no gradient outside that range.
        inside = (x >= eps) & (x <= 1 - eps)
        x = jnp.where(inside, x, lax.stop_gradient(jnp.clip(x, eps, 1 - eps)))
    return jnp.log(x / (1 - x))


@lowering("pd_op.polygamma")
def polygamma(x, *, n):
    x = _floating(x)
    return jsp.polygamma(int(n), x)


@lowering("pd_op.angle")
def angle(x):
    x = _floating(x)
    if jnp.iscomplexobj(x):
        return jnp.angle(x)
    # NOTE: for real inputs the angle is 0 or pi, with no gradient (Paddle's angle_grad is zero).
    return lax.stop_gradient(jnp.where(x < 0, jnp.asarray(jnp.pi, x.dtype), jnp.zeros_like(x)))


@lowering("pd_op.gammaincc")
def gammaincc(x, y):
    # NOTE: Q(x, y), the regularised upper incomplete gamma; Paddle differentiates only w.r.t. y.
    x, y = _floating(x), _floating(y)
    return jsp.gammaincc(lax.stop_gradient(x), y)
