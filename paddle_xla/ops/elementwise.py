"""Elementwise arithmetic with NumPy-style broadcasting: add ... pow, fmax/fmin, scale, cast, clip,
sign, increment, heaviside, copysign, nextafter, lerp, add_n."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import lowering
from .util import dtype as jax_dtype
from .util import is_static, is_symbolic, static_scalar, traced_where_symbols_meet_arrays, xp


def _kind(a) -> str:
    return np.dtype(a.dtype).kind if hasattr(a, "dtype") else "f"


def align(x, y):
    """Operands of a binary op, with a constant taking the other operand's dtype.

    NOTE: a NumPy constant from pd_op.full stands for a Python scalar in the user's code; Paddle gives
    the result the tensor's dtype, so the constant must not promote float32 to float64. An int
    constant next to a float tensor becomes float too; a float constant next to an int tensor stays
    float (Paddle promotes those)."""
    x, y = traced_where_symbols_meet_arrays(x, y)
    xs, ys = is_static(x), is_static(y)
    if xs and not ys and not (_kind(x) == "f" and _kind(y) in "biu"):
        x = np.asarray(x).astype(y.dtype)
    elif ys and not xs and not (_kind(y) == "f" and _kind(x) in "biu"):
        y = np.asarray(y).astype(x.dtype)
    return x, y


def _is_int(a) -> bool:
    return _kind(a) in "biu"


def _binary(name, fn, **declared):
    @lowering(name, **declared)
    def binary(x, y):
        x, y = align(x, y)
        return fn(xp(x, y), x, y)

    binary.__name__ = name.split(".")[-1]
    return binary


_binary("pd_op.add", lambda m, x, y: m.add(x, y), layout="binary", inplace=True)
_binary("pd_op.subtract", lambda m, x, y: m.subtract(x, y), layout="binary")
_binary("pd_op.multiply", lambda m, x, y: m.multiply(x, y), layout="binary")
# NOTE: maximum/minimum split the gradient evenly on ties, as jnp's do and as Paddle's kernels do.
_binary("pd_op.maximum", lambda m, x, y: m.maximum(x, y), layout="binary")
_binary("pd_op.minimum", lambda m, x, y: m.minimum(x, y), layout="binary")
_binary("pd_op.remainder", lambda m, x, y: m.remainder(x, y))
_binary("pd_op.atan2", lambda m, x, y: m.arctan2(*_float_pair(x, y)))


def _float_pair(x, y):
    # NOTE: Paddle's atan2 takes integer inputs and answers in float64.
    if _is_int(x) and _is_int(y):
        return jnp.asarray(x, jnp.float64), jnp.asarray(y, jnp.float64)
    return x, y


@lowering("pd_op.divide")
def divide(x, y):
    x, y = align(x, y)
    if not (_is_int(x) and _is_int(y)):
        return xp(x, y).true_divide(x, y)
    # NOTE: the kernel divides integers as C++ does (truncating); Paddle's Python API casts them to
    # float first, so this is only met in hand-built programs or in shape arithmetic.
    if is_static(x, y):
        quotient = np.trunc(np.asarray(x) / np.asarray(y))
        return quotient.astype(np.result_type(x, y))
    return lax.div(*jnp.broadcast_arrays(x, y))


@lowering("pd_op.floor_divide")
def floor_divide(x, y):
    # NOTE: Python's floor division (Paddle >= 2.6), not C++ truncation; jnp uses the same divmod
    # algorithm as Paddle's float kernel.
    x, y = align(x, y)
    return xp(x, y).floor_divide(x, y)


def _fmax_fmin(x, y, take_x):
    # NOTE: NaN-ignoring max/min whose gradient goes to x on ties (Paddle's FMaxGradDx: x >= y).
    x, y = align(x, y)
    keep_x = take_x(x, y) | (jnp.isnan(y) if not _is_int(y) else False)
    return jnp.where(keep_x, x, y)


@lowering("pd_op.fmax")
def fmax(x, y):
    return _fmax_fmin(x, y, lambda a, b: a >= b)


@lowering("pd_op.fmin")
def fmin(x, y):
    return _fmax_fmin(x, y, lambda a, b: a <= b)


def _int_power(x, y):
    # NOTE: Paddle computes integer powers through C's pow on doubles, truncated back: a negative
    # exponent gives 0 except for bases 1 and -1 (and 0 for base 0).
    pos = jnp.power(x, jnp.maximum(y, 0))
    odd = (y % 2) != 0
    neg = jnp.where(x == 1, 1, jnp.where(x == -1, jnp.where(odd, -1, 1), 0)).astype(pos.dtype)
    return jnp.where(y < 0, neg, pos)


@lowering("pd_op.elementwise_pow")
def elementwise_pow(x, y):
    x, y = align(x, y)
    if _is_int(x) and _is_int(y):
        return _int_power(jnp.asarray(x), jnp.asarray(y))
    if is_static(y) and np.ndim(y) == 0 and float(y) == int(y):
        # NOTE: an integral constant exponent (x ** 2) is x*x in XLA, exact for negative x.
        return lax.integer_pow(jnp.asarray(x), int(y))
    return jnp.power(x, y)


@lowering("pd_op.pow", amp="black")
def pow_(x, *, y):
    if _is_int(x):
        # NOTE: on integers Paddle truncates the exponent to an integer first (x ** 2.7 == x ** 2).
        return _int_power(x, jnp.asarray(int(y), x.dtype))
    if float(y) == int(y):
        return lax.integer_pow(x, int(y))
    return jnp.power(x, jnp.asarray(y, x.dtype))


def _compute_dtype(x):
    # NOTE: Paddle computes half-precision arithmetic in float32 and rounds once.
    return jnp.float32 if x.dtype in (jnp.float16, jnp.bfloat16) else x.dtype


@lowering("pd_op.scale")
def scale(x, s, *, bias, bias_after_scale):
    if is_symbolic(x) and is_static(s):
        # NOTE: shape arithmetic on a symbolic dimension (PaddleFormers' seq_length + cache_length): it
        # stays a symbol, an integer value as Paddle's int scale makes it (factor and bias truncated)
        k, b = int(static_scalar(s)), int(bias)
        return x * k + b if bias_after_scale else (x + b) * k
    if is_static(s):
        s = static_scalar(s)
    else:
        # NOTE: Paddle's scale has no gradient for a tensor-valued factor.
        s = lax.stop_gradient(jnp.reshape(s, ()))
    if _is_int(x):
        # NOTE: Paddle casts the factor and bias to the integer type (truncating) before computing.
        s = jnp.trunc(s).astype(x.dtype) if not isinstance(s, (int, float)) else int(s)
        b = int(bias)
    else:
        b = bias
    if is_static(x, s) and _is_int(x):
        # NOTE: shape arithmetic (a static shape times 2) stays NumPy, static under jit.
        return np.asarray(x * s + b if bias_after_scale else (x + b) * s, dtype=np.asarray(x).dtype)
    ct = _compute_dtype(x)
    xc = jnp.asarray(x, ct)
    s = jnp.asarray(s, ct)
    b = jnp.asarray(b, ct)
    out = xc * s + b if bias_after_scale else (xc + b) * s
    return out.astype(x.dtype)


@lowering("pd_op.cast", layout="unary")
def cast(x, *, dtype):
    dt = jax_dtype(dtype)
    if is_symbolic(x):
        return x  # NOTE: symbolic dimensions stay symbols; their run-time values are ints
    if is_static(x):
        return np.asarray(x).astype(np.dtype(dt))
    if _kind(x) == "f" and np.dtype(dt).kind in "iu":
        return _float_to_int(x, np.dtype(dt))
    return x.astype(dt)


def _float_to_int(x, dt):
    """A float -> integer cast as Paddle's CPU kernel (static_cast on x86-64) does it.

    The conversion truncates toward zero into a 32-bit integer (64-bit for 64-bit targets), then a
    narrow target keeps its low bits (-1.7 -> 255 for uint8, 300 -> 44). A value out of that
    integer's range, or NaN, becomes its most negative value (x86's "integer indefinite"), so
    3e9 -> int32 -2147483648 and uint8 0. XLA's own convert saturates instead (3e9 -> 2147483647).
    """
    wide = jnp.int64 if dt.itemsize == 8 else jnp.int32
    limit = float(2 ** (np.iinfo(wide).bits - 1))
    xf = x.astype(jnp.float32) if x.dtype.itemsize < 4 else x  # NOTE: half can't hold the limits
    fits = (xf >= -limit) & (xf < limit)
    converted = jnp.where(fits, xf, 0).astype(wide)
    return jnp.where(fits, converted, np.iinfo(wide).min).astype(dt)


@lowering("pd_op.clip")
def clip(x, lo, hi):
    # NOTE: the gradient passes where lo <= x <= hi, both bounds included (Paddle's ClipGradFunctor);
    # jnp.clip would halve it on the bounds.
    lo = jnp.asarray(lo, x.dtype).reshape(()) if np.size(lo) == 1 else jnp.asarray(lo, x.dtype)
    hi = jnp.asarray(hi, x.dtype).reshape(()) if np.size(hi) == 1 else jnp.asarray(hi, x.dtype)
    lo, hi = lax.stop_gradient(lo), lax.stop_gradient(hi)
    inside = (x >= lo) & (x <= hi)
    # NOTE: NaN is neither below lo nor above hi, so Paddle passes it through (with a zero gradient,
    # as it is not `inside` either); hence the explicit `x > hi` rather than "otherwise hi".
    outside = jnp.where(x < lo, lo, jnp.where(x > hi, hi, x))
    return jnp.where(inside, x, lax.stop_gradient(outside))


@lowering("pd_op.sign")
def sign(x):
    return xp(x).sign(x)


# NOTE: paddle.increment emits the in-place pd_op.increment_, whose result PIR hands back as the
# input's own value; it can be lowered once capture maps in-place results (see the lead's notes).
@lowering("pd_op.increment")
def increment(x, *, value):
    return x + np.asarray(value).astype(np.dtype(x.dtype))


@lowering("pd_op.heaviside")
def heaviside(x, y):
    # NOTE: Paddle's heaviside has no gradient for x and passes dout * (x == 0) to y.
    x, y = align(x, y)
    zero_x = lax.stop_gradient(x) == 0
    step = jnp.where(lax.stop_gradient(x) > 0, 1, 0).astype(jnp.result_type(x, y))
    return jnp.where(zero_x, y, step)


@lowering("pd_op.copysign")
def copysign(x, y):
    x, y = align(x, y)
    y = lax.stop_gradient(jnp.asarray(y))
    if _is_int(x):
        return jnp.where(y < 0, -jnp.abs(x), jnp.abs(x))
    # NOTE: no gradient to y; to x, +-1 except 0 where x == 0 (Paddle's CopySignGradXFunctor).
    out = jnp.copysign(x, y.astype(x.dtype))
    return jnp.where(x == 0, lax.stop_gradient(out), out)


@lowering("pd_op.nextafter")
def nextafter(x, y):
    x, y = align(x, y)
    return jnp.nextafter(lax.stop_gradient(x), lax.stop_gradient(y))


@lowering("pd_op.lerp")
def lerp(x, y, weight):
    x, y = align(x, y)
    # NOTE: Paddle's lerp gives no gradient to the weight.
    w = lax.stop_gradient(jnp.asarray(weight, x.dtype))
    return x + w * (y - x)


@lowering("pd_op.add_n")
def add_n(xs):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out
