"""Pooling: max/avg/lp over windows (lax.reduce_window), adaptive pools, max pools with indices, unpool.

Window arithmetic follows Paddle's CPU kernels (phi/kernels/funcs/pooling.cc): a window starts at
o*stride - pad_lo; only the low pad places windows, the high pad only adds output rows; an
"inclusive" average divides by the window clipped to [-pad_lo, in + pad_lo), an exclusive one by the
part inside the input. All window bounds are static, so divisors and indices are NumPy constants.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import LoweringError
from .conv import channel_last, pad_pairs
from .registry import lowering
from .util import dim_product, static_ints

_IGNORED = ("use_cudnn", "use_mkldnn", "use_quantizer", "mkldnn_data_type", "is_test")


def spatial_axes(ndim: int, data_format: str) -> list[int]:
    return list(range(1, ndim - 1)) if channel_last(data_format) else list(range(2, ndim))


# NOTE: Paddle's max pools start from -FLT_MAX, whatever the dtype: a window that is all padding
# (ceil_mode, padding >= kernel) or all -inf gives -3.4e38 (-inf only in float16, where it rounds so).
MAX_POOL_LOWEST = np.finfo(np.float32).min


def out_size(n, k, lo, hi, s, ceil_mode):
    """Paddle's PoolOutputSize, with C++'s division that truncates toward zero: a length-1 input
    and kernel 2, stride 2, VALID still gives one (clipped) window, as Paddle does."""
    span = n - k + lo + hi + (s - 1 if ceil_mode else 0)
    count = (span // s if span >= 0 else -(-span // s)) + 1
    if count < 0:
        raise LoweringError(
            f"pooling a length-{n} dimension with kernel {k}, stride {s} and pads ({lo}, {hi}) "
            f"gives {count} outputs; Paddle refuses it too"
        )
    return count


def lowest_to_paddle(out):
    """-inf (empty or all -inf windows) as Paddle's -FLT_MAX; the gradient is 0 there."""
    lowest = np.asarray(MAX_POOL_LOWEST).astype(np.dtype(out.dtype))
    return jnp.where(out < lowest, lowest, out)


def resolve(sizes, ksize, strides, paddings, algorithm, global_pooling, adaptive):
    """Paddle's UpdatePadding/UpdateKernelSize: kernel, (lo, hi) pads per spatial dim."""
    nd = len(sizes)
    if global_pooling:
        return list(sizes), [(0, 0)] * nd
    if adaptive or algorithm == "VALID":
        return list(ksize), [(0, 0)] * nd
    if algorithm == "SAME":
        pads = []
        for n, k, s in zip(sizes, ksize, strides):
            total = max(((n + s - 1) // s - 1) * s + k - n, 0)
            pads.append((total // 2, total - total // 2))
        return list(ksize), pads
    return list(ksize), pad_pairs(paddings, nd)


def window_bounds(n, k, s, lo, o_count, adaptive):
    """Per output position: (start, end) of the window in input coordinates, unclipped."""
    o = np.arange(o_count)
    if adaptive:
        return (o * n) // o_count, -((-(o + 1) * n) // o_count)
    start = o * s - lo
    return start, np.minimum(start + k, n + lo)


# ---- max / avg / lp pooling -----------------------------------------------------------------
def pool_nd(
    x,
    ksize,
    strides,
    paddings,
    ceil_mode,
    exclusive,
    data_format,
    pooling_type,
    global_pooling,
    adaptive,
    padding_algorithm,
    norm_type=None,
):
    if pooling_type == "avg" and x.dtype in (jnp.float16, jnp.bfloat16):
        # NOTE: Paddle sums half-precision windows in float32 (its MPType) and rounds the mean once;
        # a float16 sum of a few -6e4s would overflow to -inf first.
        out = pool_nd(
            x.astype(jnp.float32),
            ksize,
            strides,
            paddings,
            ceil_mode,
            exclusive,
            data_format,
            pooling_type,
            global_pooling,
            adaptive,
            padding_algorithm,
            norm_type,
        )
        return out.astype(x.dtype)
    axes = spatial_axes(x.ndim, data_format)
    sizes = [x.shape[a] for a in axes]
    strides = list(strides) if strides else [1] * len(axes)
    ksize, pads = resolve(sizes, ksize, strides, paddings, padding_algorithm, global_pooling, adaptive)
    if adaptive and not global_pooling:
        return adaptive_pool(x, axes, ksize, pooling_type, norm_type)
    counts = [out_size(n, k, lo, hi, s, ceil_mode) for n, k, (lo, hi), s in zip(sizes, ksize, pads, strides)]
    if pooling_type == "max":
        # NOTE: lax.max propagates NaN; Paddle's `y = y > x ? y : x` keeps a NaN only when it is the
        # window's last element (and drops it otherwise). Not emulated: reduce_window needs a
        # commutative reducer.
        return lowest_to_paddle(window_reduce(x, axes, ksize, strides, pads, counts, -jnp.inf, lax.max))
    if pooling_type == "lp":
        p = float(norm_type)
        total = window_reduce(x ** jnp.asarray(p, x.dtype), axes, ksize, strides, pads, counts, 0, lax.add)
        return total ** jnp.asarray(1.0 / p, x.dtype)
    total = window_reduce(x, axes, ksize, strides, pads, counts, 0, lax.add)
    return total / avg_divisor(x.ndim, axes, sizes, ksize, strides, pads, counts, exclusive).astype(x.dtype)


def window_reduce(x, axes, ksize, strides, pads, counts, init, op):
    """reduce_window over the spatial axes, padded so that exactly `counts` windows fit."""
    padded, window, stride = _padded_windows(x, axes, ksize, strides, pads, counts, init)
    # NOTE: a NumPy init stays concrete under jit, which is how JAX recognises a max/sum window
    # reduction it can differentiate.
    return lax.reduce_window(padded, np.asarray(init, x.dtype), op, tuple(window), tuple(stride), "VALID")


def _padded_windows(x, axes, ksize, strides, pads, counts, init):
    """(x padded with `init` so that exactly `counts` windows fit, window, stride) over all axes."""
    config = [(0, 0, 0)] * x.ndim
    window, stride = [1] * x.ndim, [1] * x.ndim
    for a, n, k, s, (lo, _), c in zip(axes, [x.shape[a] for a in axes], ksize, strides, pads, counts):
        # NOTE: the high pad may be negative (rows no window reaches); lax.pad crops them.
        config[a] = (lo, (c - 1) * s + k - n - lo, 0)
        window[a], stride[a] = k, s
    return lax.pad(x, np.asarray(init, x.dtype), config), window, stride


# NOTE: the most taps a max pool takes as shifted maxima (max_pool_by_shifts); larger windows (SPP's
# 5x5-13x13) stay one reduce_window.
SHIFTED_POOL_TAPS = 16


def shifted_max_pool(
    x,
    kernel_size,
    *,
    strides,
    paddings,
    ceil_mode,
    data_format,
    pooling_type,
    global_pooling,
    adaptive,
    padding_algorithm,
    **_exclusive,
) -> bool:
    """Whether pool2d(x, ...) is a small-window max pool that max_pool_by_shifts computes."""
    if pooling_type != "max" or adaptive or global_pooling or getattr(x, "ndim", 0) != 4:
        return False
    return dim_product(static_ints(kernel_size)) <= SHIFTED_POOL_TAPS


def max_pool_by_shifts(
    x,
    kernel_size,
    *,
    strides,
    paddings,
    ceil_mode,
    data_format,
    padding_algorithm,
    global_pooling=False,
    **_other_attrs,
):
    """pool2d's max pool as the elementwise maximum of one strided slice per tap, which XLA fuses into one
    loop with the op before it. Forward only: the maximum's gradient splits ties, Paddle's goes to
    the window's first maximum.

    NOTE: XLA:CPU's reduce_window runs ResNet-50's 3x3/2 pool (8x64x112², 1 core) in 7.3 ms, 10.1
    with the ReLU before it; as 9 slices 4.5 and 3.5 ms."""
    axes = spatial_axes(x.ndim, data_format)
    sizes = [x.shape[a] for a in axes]
    strides = list(strides) if strides else [1] * len(axes)
    ksize, pads = resolve(sizes, static_ints(kernel_size), strides, paddings, padding_algorithm, global_pooling, False)
    counts = [out_size(n, k, lo, hi, s, ceil_mode) for n, k, (lo, hi), s in zip(sizes, ksize, pads, strides)]
    padded, _, _ = _padded_windows(x, axes, ksize, strides, pads, counts, -jnp.inf)
    out = None
    for taps in np.ndindex(*ksize):
        start, limit, step = [0] * x.ndim, list(padded.shape), [1] * x.ndim
        for a, t, s, c in zip(axes, taps, strides, counts):
            start[a], limit[a], step[a] = t, t + (c - 1) * s + 1, s
        tap = lax.slice(padded, start, limit, step)
        out = tap if out is None else jnp.maximum(out, tap)
    return lowest_to_paddle(out)


def avg_divisor(ndim, axes, sizes, ksize, strides, pads, counts, exclusive):
    div = np.ones([1] * ndim, np.float64)
    for a, n, k, s, (lo, _), c in zip(axes, sizes, ksize, strides, pads, counts):
        start, end = window_bounds(n, k, s, lo, c, False)
        if exclusive:
            start, end = np.maximum(start, 0), np.minimum(end, n)
        shape = [1] * ndim
        shape[a] = c
        div = div * (end - start).reshape(shape)
    return div


def adaptive_pool(x, axes, out_sizes, pooling_type, norm_type):
    # NOTE: adaptive windows are rectangles, so max, sum and mean are taken one axis at a time.
    for a, o in zip(axes, out_sizes):
        x = adaptive_axis(x, a, o, pooling_type, norm_type)
    return x


def adaptive_axis(x, axis, o, pooling_type, norm_type):
    n = x.shape[axis]
    start, end = window_bounds(n, 0, 1, 0, o, True)
    width = int((end - start).max())
    idx = np.minimum(start[:, None] + np.arange(width)[None, :], n - 1)
    valid = (start[:, None] + np.arange(width)[None, :]) < end[:, None]
    g = jnp.take(x, idx.reshape(-1), axis=axis)
    g = g.reshape(x.shape[:axis] + (o, width) + x.shape[axis + 1 :])
    mask = valid.reshape((1,) * axis + (o, width) + (1,) * (x.ndim - axis - 1))
    if pooling_type == "max":
        return jnp.max(jnp.where(mask, g, -jnp.inf), axis=axis + 1)
    if pooling_type == "lp":
        raise NotImplementedError("adaptive lp pooling is not a Paddle mode")
    total = jnp.sum(jnp.where(mask, g, 0), axis=axis + 1)
    count = (end - start).reshape((1,) * axis + (o,) + (1,) * (x.ndim - axis - 1))
    return total / count.astype(x.dtype)


@lowering("pd_op.pool2d", ignore=_IGNORED, layout="data_format")
def pool2d(
    x,
    kernel_size,
    *,
    strides,
    paddings,
    ceil_mode,
    exclusive,
    data_format,
    pooling_type,
    global_pooling,
    adaptive,
    padding_algorithm,
):
    return pool_nd(
        x,
        static_ints(kernel_size),
        strides,
        paddings,
        ceil_mode,
        exclusive,
        data_format,
        pooling_type,
        global_pooling,
        adaptive,
        padding_algorithm,
    )


@lowering("pd_op.pool3d", ignore=_IGNORED)
def pool3d(
    x,
    *,
    kernel_size,
    strides,
    paddings,
    ceil_mode,
    exclusive,
    data_format,
    pooling_type,
    global_pooling,
    adaptive,
    padding_algorithm,
):
    return pool_nd(
        x,
        kernel_size,
        strides,
        paddings,
        ceil_mode,
        exclusive,
        data_format,
        pooling_type,
        global_pooling,
        adaptive,
        padding_algorithm,
    )


@lowering("pd_op.lp_pool2d", ignore=_IGNORED)
def lp_pool2d(
    x,
    *,
    kernel_size,
    strides,
    paddings,
    ceil_mode,
    exclusive,
    data_format,
    pooling_type,
    global_pooling,
    adaptive,
    padding_algorithm,
    norm_type,
):
    return pool_nd(
        x,
        kernel_size,
        strides,
        paddings,
        ceil_mode,
        exclusive,
        data_format,
        "lp",
        global_pooling,
        adaptive,
        padding_algorithm,
        norm_type,
    )


# ---- max pooling that also returns the argmax (flat index in each input plane) -----------------
def window_indices(n, k, s, lo, o_count, adaptive):
    """(o_count, width) input indices of every window, clipped, and which of them are real."""
    start, end = window_bounds(n, k, s, lo, o_count, adaptive)
    if not adaptive:
        start, end = np.maximum(start, 0), np.minimum(end, n)
    width = int((end - start).max())
    raw = start[:, None] + np.arange(width)[None, :]
    return np.clip(raw, 0, n - 1), raw < end[:, None]


def max_pool_with_index(x, ksize, strides, paddings, global_pooling, adaptive, ceil_mode):
    nd = x.ndim - 2
    sizes = list(x.shape[2:])
    if global_pooling:
        ksize, paddings = sizes, [0] * nd
    pads = [(0, 0)] * nd if adaptive else pad_pairs(paddings, nd)
    counts = (
        list(ksize)
        if adaptive
        else [out_size(n, k, lo, hi, s, ceil_mode) for n, k, (lo, hi), s in zip(sizes, ksize, pads, strides)]
    )
    per_dim = [
        window_indices(n, k, s, lo, c, adaptive) for n, k, s, (lo, _), c in zip(sizes, ksize, strides, pads, counts)
    ]
    return windowed_argmax(x, per_dim)


def windowed_argmax(x, per_dim):
    """Max over each window of an NC* input, and its flat index in the input plane; per_dim holds
    each spatial dim's (indices, valid) arrays of shape (outputs, window width)."""
    counts = tuple(ix.shape[0] for ix, _ in per_dim)
    idx, valid, flat = _window_grid(per_dim, x.shape[2:])
    patches = x[(slice(None), slice(None)) + idx]  # N, C, o1..on, w1..wn
    patches = patches.reshape(x.shape[:2] + counts + (-1,))
    patches = jnp.where(valid.reshape(counts + (-1,)), patches, -jnp.inf)
    # NOTE: argmax takes the first maximum in scan order, as Paddle's kernel does; gathering the
    # output through it sends the whole gradient to that one element, as Paddle's backward does.
    arg = jnp.argmax(patches, axis=-1)[..., None]
    out = jnp.take_along_axis(patches, arg, axis=-1)[..., 0]
    mask = jnp.take_along_axis(jnp.broadcast_to(flat.reshape(counts + (-1,)), patches.shape), arg, -1)[..., 0]
    # NOTE: a window that is all padding is Paddle's -FLT_MAX at index -1.
    if isinstance(valid, np.ndarray):  # static windows (fractional pools' may be traced)
        widths = tuple(ix.shape[1] for ix, _ in per_dim)
        empty = ~np.broadcast_to(valid, counts + widths).reshape(counts + (-1,)).any(axis=-1)
        mask = jnp.where(empty, -1, mask) if empty.any() else mask
    return lowest_to_paddle(out), mask.astype(jnp.int32)


def _window_grid(per_dim, sizes):
    """Broadcast per-dim window indices to shape (o1, ..., on, w1, ..., wn) (NumPy or jnp)."""
    nd = len(per_dim)
    idx, valid, flat = [], True, 0
    for d, (ix, ok) in enumerate(per_dim):
        shape = [1] * (2 * nd)
        shape[d], shape[nd + d] = ix.shape
        ix, ok = ix.reshape(shape), ok.reshape(shape)
        idx.append(ix)
        valid = valid & ok
        flat = flat * sizes[d] + ix
    return tuple(idx), valid, flat


@lowering("pd_op.max_pool2d_with_index", "pd_op.max_pool3d_with_index", ignore=_IGNORED)
def max_pool2d_with_index(x, *, kernel_size, strides, paddings, global_pooling, adaptive, ceil_mode=False):
    return max_pool_with_index(x, kernel_size, strides, paddings, global_pooling, adaptive, ceil_mode)


# ---- fractional max pooling ---------------------------------------------------------------------
def fractional_windows(n, o, pool, u, xp):
    """Paddle's FractionalStart/EndIndex in float32: (indices, valid) of shape (o, width). `u` may be
    a traced scalar (then xp is jnp); the width bound stays static."""
    f32 = np.float32
    alpha = f32(n - pool) / f32(o - (1 if pool > 0 else 0))
    if pool == 0:
        base = n // o
        u_max = min(f32(base + 2) / alpha - f32(1), f32(n + 1 - base) / alpha - f32(o - 1))
        u = u * f32(u_max)
    i = xp.arange(o).astype(f32)
    offset = xp.trunc(u * alpha)
    start = xp.trunc((i + u) * alpha) - offset
    end = start + pool if pool > 0 else xp.trunc((i + f32(1) + u) * alpha) - offset
    start, end = xp.maximum(start, 0).astype(np.int32), xp.minimum(end, n).astype(np.int32)
    width = pool if pool > 0 else int(np.floor(alpha)) + 1
    raw = start[:, None] + xp.arange(width)[None, :]
    return xp.clip(raw, 0, n - 1), raw < end[:, None]


def fractional_max_pool(key, x, output_size, kernel_size, random_u):
    if random_u:
        u, xp = np.float32(random_u), np
    else:
        # NOTE: Paddle draws u from its own generator; here it comes from the step key.
        u, xp = jax.random.uniform(key, (), jnp.float32), jnp
    pools = list(kernel_size) if kernel_size else [0] * len(output_size)
    per_dim = [fractional_windows(n, o, k, u, xp) for n, o, k in zip(x.shape[2:], output_size, pools)]
    return windowed_argmax(x, per_dim)


@lowering("pd_op.fractional_max_pool2d", "pd_op.fractional_max_pool3d", kind="random")
def fractional_max_pool2d(key, x, *, output_size, kernel_size=(), random_u=0.0, return_mask=False):
    return fractional_max_pool(key, x, output_size, kernel_size, random_u)


# ---- unpool: scatter values back to where a max pool found them --------------------------------
def unpool_nd(x, indices, sizes):
    n, c = x.shape[:2]
    flat_x = x.reshape(n, c, -1)
    flat_i = indices.reshape(n, c, -1).astype(jnp.int32)
    out = jnp.zeros((n, c, dim_product(sizes)), x.dtype)
    out = out.at[jnp.arange(n)[:, None, None], jnp.arange(c)[None, :, None], flat_i].set(flat_x)
    return out.reshape((n, c) + tuple(sizes))


def unpool_sizes(x, ksize, strides, padding):
    pads = pad_pairs(padding, x.ndim - 2)
    return [(n - 1) * s - lo - hi + k for n, s, (lo, hi), k in zip(x.shape[2:], strides, pads, ksize)]


@lowering("pd_op.unpool")
def unpool(x, indices, output_size=None, *, ksize, strides, padding, data_format="NCHW"):
    if output_size is not None and len(static_ints(output_size)):
        sizes = static_ints(output_size)[-2:]
    else:
        sizes = unpool_sizes(x, ksize, strides, padding)
    return unpool_nd(x, indices, sizes)


@lowering("pd_op.unpool3d")
def unpool3d(x, indices, *, ksize, strides, paddings, output_size=(), data_format="NCDHW"):
    sizes = list(output_size)[-3:] if output_size else unpool_sizes(x, ksize, strides, paddings)
    return unpool_nd(x, indices, sizes)
