"""Resampling: nearest/linear/bilinear/trilinear/bicubic interpolation, affine_grid, grid_sample.

Interpolation reproduces Paddle's CPU kernel (phi/kernels/cpu/interpolate_kernel.cc) index for
index, including its float32 coordinate arithmetic, which is not jax.image.resize's: source indices
are truncated toward zero, align_mode=1 maps out*ratio, and a scale factor (not the size ratio) sets
the step. All sizes are static, so each axis becomes a gather with NumPy-computed taps and weights;
separable methods are applied one axis at a time.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from .conv import channel_last
from .registry import lowering
from .util import static_ints

F32 = np.float32


# ---- output size and step ---------------------------------------------------------------------
def _scales(nd, scale_tensor, scale):
    if scale_tensor is not None:
        vals = [float(v) for v in np.asarray(scale_tensor).reshape(-1)]
        return vals * nd if len(vals) == 1 else vals[:nd]
    if nd == 1 and len(scale) > 0:
        return [float(scale[0])]
    return [float(s) for s in scale[:nd]] if len(scale) > 1 else [-1.0] * nd


def output_sizes(in_sizes, out_size, size_tensor, scale_tensor, attr_sizes, scale):
    """Paddle's precedence: SizeTensor, else out = int(in * scale) overridden by OutSize, else attrs."""
    nd = len(in_sizes)
    if size_tensor is not None and len(size_tensor) > 0:
        return static_ints(size_tensor)[:nd], [-1.0] * nd
    scales = _scales(nd, scale_tensor, scale)
    sizes = list(attr_sizes)
    if all(s > 0 for s in scales):
        sizes = [int(F32(n) * F32(s)) for n, s in zip(in_sizes, scales)]
    else:
        scales = [-1.0] * nd
    if out_size is not None:
        sizes = static_ints(out_size)[:nd]
    return sizes, scales


def ratio(n_in, n_out, scale, align_corners, single_output_step=False):
    # NOTE: for a single output Paddle's kernels use step 0 (sample index 0), except trilinear and
    # the forward linear kernel without align_corners (single_output_step, see interpolate).
    if n_out <= 1 and (align_corners or not single_output_step):
        return F32(0)
    if align_corners:
        return F32(n_in - 1) / F32(n_out - 1)
    return F32(1.0 / F32(scale)) if scale > 0 else F32(n_in) / F32(n_out)


# ---- per-axis taps and weights ----------------------------------------------------------------------
def linear_taps(n_in, n_out, r, align_corners, align_mode):
    k = np.arange(n_out)
    if align_mode == 0 and not align_corners:
        src = np.float64(r) * (k + 0.5) - 0.5  # NOTE: C++ promotes to double here
        lo = np.maximum(np.trunc(src).astype(np.int64), 0)
        frac = np.maximum(src.astype(F32), F32(0)) - lo.astype(F32)
    else:
        prod = r * k.astype(F32)  # float * int stays float32
        lo = np.maximum(np.trunc(prod).astype(np.int64), 0)
        frac = prod - lo.astype(F32)
    hi = np.minimum(lo + 1, n_in - 1)
    return np.stack([lo, hi], 1), np.stack([F32(1) - frac, frac], 1).astype(F32)


def nearest_taps(n_out, r, align_corners):
    prod = r * np.arange(n_out).astype(F32)
    idx = np.trunc(prod.astype(np.float64) + 0.5) if align_corners else np.trunc(prod)
    return idx.astype(np.int64)[:, None], np.ones((n_out, 1), F32)


def _cubic_weights(t, dt):
    a = dt(-0.75)
    one = dt(1)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + one

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return np.stack([far(t + one), near(t), near(one - t), far(one - t + one)], 1)


def cubic_taps(n_in, n_out, r, align_corners, dt):
    k = np.arange(n_out)
    src = (r * k.astype(F32)).astype(dt) if align_corners else (np.float64(r) * (k + 0.5) - 0.5).astype(dt)
    base = np.floor(src.astype(F32)).astype(np.int64)
    t = (src - base.astype(dt)).astype(dt)
    idx = np.clip(base[:, None] + np.arange(-1, 3)[None, :], 0, n_in - 1)
    return idx, _cubic_weights(t, dt)


def apply_taps(x, axis, idx, weights):
    """out[..., k, ...] = sum_j x[..., idx[k, j], ...] * weights[k, j] along `axis`."""
    n_out, taps = idx.shape
    g = jnp.take(x, jnp.asarray(idx.reshape(-1)), axis=axis)
    if taps == 1:
        return g
    g = g.reshape(x.shape[:axis] + (n_out, taps) + x.shape[axis + 1 :])
    w = weights.reshape((n_out, taps) + (1,) * (x.ndim - axis - 1))
    return jnp.sum(g * jnp.asarray(w, x.dtype), axis=axis + 1)


# ---- the interp ops ----------------------------------------------------------------------------------
def interpolate(
    x, out_size, size_tensor, scale_tensor, data_format, attr_sizes, scale, method, align_corners, align_mode
):
    axes = list(range(1, x.ndim - 1)) if channel_last(data_format) else list(range(2, x.ndim))
    in_sizes = [x.shape[a] for a in axes]
    sizes, scales = output_sizes(in_sizes, out_size, size_tensor, scale_tensor, attr_sizes[-len(axes) :], scale)
    if list(sizes) == in_sizes:
        return x
    # NOTE: half precision is interpolated in float32, like Paddle's CPU kernel does its weights.
    ct = jnp.float32 if x.dtype in (jnp.float16, jnp.bfloat16) else x.dtype
    dt = np.float64 if ct == jnp.float64 else F32
    y = x.astype(ct)
    for a, n_in, n_out, s in zip(axes, in_sizes, sizes, scales):
        r = ratio(n_in, n_out, s, align_corners, method == "trilinear")
        if method == "nearest":
            idx, w = nearest_taps(n_out, r, align_corners)
        elif method == "bicubic":
            idx, w = cubic_taps(n_in, n_out, r, align_corners, dt)
        else:
            idx, w = linear_taps(n_in, n_out, r, align_corners, align_mode)
        r_fwd = ratio(n_in, n_out, s, align_corners, method in ("linear", "trilinear"))
        if r_fwd != r:
            # NOTE: Paddle 3.3's forward linear kernel keeps the in/out step (or 1/scale) for a
            # single output, so size=[1] of [1, 2, 3] samples 3 * 0.5 - 0.5 = 1.0, i.e. 2.0
            # (align_mode=0); its backward kernel uses step 0 and sends the gradient to index 0
            # (trilinear keeps the step both ways). Both are Paddle's: the forward value from the
            # first taps, the gradient from the second.
            ys = apply_taps(y, a, *linear_taps(n_in, n_out, r_fwd, align_corners, align_mode))
            y0 = apply_taps(y, a, idx, w)
            y = lax.stop_gradient(ys) + (y0 - lax.stop_gradient(y0))
        else:
            y = apply_taps(y, a, idx, w)
    return y.astype(x.dtype)


def _interp_lowering(name):
    @lowering(name)
    def interp(
        x,
        out_size=None,
        size_tensor=None,
        scale_tensor=None,
        *,
        data_format="NCHW",
        out_d=-1,
        out_h=-1,
        out_w=-1,
        scale=(),
        interp_method,
        align_corners=False,
        align_mode=1,
    ):
        return interpolate(
            x,
            out_size,
            size_tensor,
            scale_tensor,
            data_format,
            [out_d, out_h, out_w],
            list(scale),
            interp_method,
            align_corners,
            align_mode,
        )

    interp.__name__ = name.split(".")[-1]
    return interp


for _name in ("nearest_interp", "bilinear_interp", "bicubic_interp", "linear_interp", "trilinear_interp"):
    _interp_lowering(f"pd_op.{_name}")


# ---- affine_grid / grid_sample -------------------------------------------------------------------------
def _base_coords(n, align_corners, dt):
    if n <= 1:
        return np.zeros((n,), dt)
    lin = np.linspace(-1.0, 1.0, n)
    return (lin if align_corners else lin * (n - 1) / n).astype(dt)


@lowering("pd_op.affine_grid", ignore=("use_cudnn",))
def affine_grid(theta, output_shape, *, align_corners=True):
    shape = static_ints(output_shape)
    dt = np.dtype(theta.dtype)
    spatial = shape[2:]  # (H, W) or (D, H, W)
    coords = [_base_coords(n, align_corners, dt) for n in spatial]
    mesh = np.meshgrid(*coords, indexing="ij")  # each of shape spatial
    # NOTE: the last coordinate is x (width), then y, then z, then the homogeneous 1.
    base = np.stack(list(mesh)[::-1] + [np.ones(spatial, dt)], axis=-1).reshape(-1, len(spatial) + 1)
    grid = jnp.einsum("pk,nik->npi", jnp.asarray(base), theta)
    return grid.reshape((shape[0], *spatial, len(spatial)))


def _unnormalize(g, size, align_corners):
    if align_corners:
        return (g + 1) * ((size - 1) * 0.5)
    return (g + 1) * (size * 0.5) - 0.5


def _reflect(c, size, align_corners):
    if align_corners:
        if size == 1:
            return jnp.zeros_like(c)
        span = 2.0 * (size - 1)
        a = jnp.abs(c)
        extra = a - jnp.floor(a / span) * span
        return jnp.minimum(extra, span - extra)
    span = 2.0 * size
    a = jnp.abs(c + 0.5)
    extra = a - jnp.floor(a / span) * span
    return jnp.clip(jnp.minimum(extra, span - extra) - 0.5, 0, size - 1)


def _source_coords(grid, sizes, padding_mode, align_corners):
    """Unnormalised source coordinate per spatial dim (outermost first), after padding_mode."""
    out = []
    for d, size in enumerate(sizes):
        c = _unnormalize(grid[..., len(sizes) - 1 - d], size, align_corners)
        if padding_mode == "border":
            c = jnp.clip(c, 0, size - 1)
        elif padding_mode == "reflection":
            c = _reflect(c, size, align_corners)
        out.append(c)
    return out


def _gather(x, idx):
    """x: (N, C, *S); idx: per spatial dim int arrays of shape (N, *O); zeros outside."""
    sizes = x.shape[2:]
    inside = jnp.ones(idx[0].shape, bool)
    for i, n in zip(idx, sizes):
        inside = inside & (i >= 0) & (i < n)
    clipped = [jnp.clip(i, 0, n - 1) for i, n in zip(idx, sizes)]
    batch = jnp.arange(x.shape[0]).reshape((-1,) + (1,) * (idx[0].ndim - 1))
    vals = x[(batch, slice(None)) + tuple(clipped)]  # (N, *O, C)
    vals = jnp.where(inside[..., None], vals, jnp.zeros((), x.dtype))
    return jnp.moveaxis(vals, -1, 1)


def _sample_linear(x, coords):
    lows = [jnp.floor(c) for c in coords]
    out = 0
    nd = len(coords)
    for corner in range(2**nd):
        idx, weight = [], 1
        for d in range(nd):
            up = (corner >> (nd - 1 - d)) & 1
            idx.append((lows[d] + up).astype(jnp.int32))
            frac = coords[d] - lows[d]
            weight = weight * (frac if up else 1 - frac)
        out = out + _gather(x, idx) * weight[:, None].astype(x.dtype)
    return out


@lowering("pd_op.grid_sample", ignore=("use_cudnn",))
def grid_sample(x, grid, *, mode="bilinear", padding_mode="zeros", align_corners=True):
    coords = _source_coords(grid.astype(x.dtype), x.shape[2:], padding_mode, align_corners)
    if mode == "nearest":
        # NOTE: Paddle rounds with nearbyint (half to even), as jnp.round does.
        return _gather(x, [jnp.round(c).astype(jnp.int32) for c in coords])
    return _sample_linear(x, coords)
