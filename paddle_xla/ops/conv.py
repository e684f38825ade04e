"""Convolutions: conv1d/2d/3d (conv1d arrives as conv2d on an unsqueezed input), depthwise, transposed.

Paddle's filter layout is always [out, in/groups, *k] for convolutions and [in, out/groups, *k] for
transposed ones, whatever the data_format; only the input/output layout follows data_format.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .registry import lowering
from .util import static_ints

_IGNORED = (
    "use_cudnn",
    "use_mkldnn",
    "fuse_relu",
    "force_fp32_output",
    "exhaustive_search",
    "workspace_size_MB",
    "is_test",
    "use_addto",
    "mkldnn_data_type",
    "fuse_activation",
    "fuse_alpha",
    "fuse_beta",
    "fuse_residual_connection",
    "fuse_relu_before_depthwise_conv",
)


def channel_last(data_format: str) -> bool:
    return data_format in ("NHWC", "NDHWC", "NLC", "NWC")


def spatial_shape(x, data_format):
    return x.shape[1:-1] if channel_last(data_format) else x.shape[2:]


def dimension_numbers(nd: int, data_format: str):
    sp = "DHW"[3 - nd :]
    io = f"N{sp}C" if channel_last(data_format) else f"NC{sp}"
    return (io, "OI" + sp, io)


def pad_pairs(paddings, nd):
    """Paddle's paddings (one per dim, or [lo0, hi0, lo1, hi1, ...]) as [(lo, hi), ...]."""
    p = list(paddings)
    if len(p) == nd:
        return [(v, v) for v in p]
    if len(p) == 2 * nd:
        return [(p[2 * i], p[2 * i + 1]) for i in range(nd)]
    raise ValueError(f"paddings {p} fit neither {nd} nor {2 * nd} values")


def resolve_padding(paddings, dilations, algorithm, in_sizes, strides, ksize):
    """Paddle's UpdatePaddingAndDilation: the explicit (lo, hi) pads and the dilations to use."""
    nd = len(in_sizes)
    dil = list(dilations) if dilations else [1] * nd
    if algorithm == "VALID":
        return [(0, 0)] * nd, dil
    if algorithm == "SAME":
        pads = []
        for n, s, k in zip(in_sizes, strides, ksize):
            out = (n + s - 1) // s
            total = max((out - 1) * s + k - n, 0)
            pads.append((total // 2, total - total // 2))
        # NOTE: Paddle resets the dilation to 1 under SAME padding (it ignores the user's dilation).
        return pads, [1] * nd
    return pad_pairs(paddings, nd), dil


def conv_nd(x, w, strides, paddings, padding_algorithm, dilations, groups, data_format):
    nd = w.ndim - 2
    pads, dil = resolve_padding(
        paddings, dilations, padding_algorithm, spatial_shape(x, data_format), strides, w.shape[2:]
    )
    return lax.conv_general_dilated(
        x,
        w.astype(x.dtype),
        window_strides=tuple(strides),
        padding=pads,
        rhs_dilation=tuple(dil),
        dimension_numbers=dimension_numbers(nd, data_format),
        feature_group_count=groups,
    )


@lowering("pd_op.conv2d", "pd_op.depthwise_conv2d", ignore=_IGNORED, amp="white", layout="conv")
@lowering("pd_op.conv3d", ignore=_IGNORED, amp="white")
def conv(x, w, *, strides, paddings, padding_algorithm="EXPLICIT", dilations=(), groups=1, data_format="NCHW"):
    return conv_nd(x, w, strides, paddings, padding_algorithm, dilations, groups or 1, data_format)


def is_pointwise_conv(w, *, paddings, padding_algorithm="EXPLICIT", groups=1, data_format="NCHW", **_ignored) -> bool:
    """A 2-D 1x1 convolution of one group and no padding (OIHW filter), as ResNet's bottlenecks use."""
    no_pads = padding_algorithm == "VALID" or (padding_algorithm != "SAME" and not any(paddings))
    return w.ndim == 4 and w.shape[2:] == (1, 1) and (groups or 1) == 1 and no_pads and data_format in ("NCHW", "NHWC")


def pointwise_conv(x, w, strides, data_format):
    """A 1x1 convolution (filter [O, C, 1, 1]) as pixels [N, H, W, C] x [O, C]^T."""
    out = lax.dot_general(to_pixels(x, strides, data_format), w[:, :, 0, 0].astype(x.dtype), (((3,), (1,)), ((), ())))
    return from_nhwc(out, data_format)


def to_pixels(x, strides, data_format):
    """The pixels a 1x1 convolution with `strides` reads, channels last."""
    nhwc = to_nhwc(x, data_format)
    return nhwc[:, :: strides[0], :: strides[1], :] if tuple(strides) != (1, 1) else nhwc


def to_nhwc(x, data_format):
    """A 4-D activation in `data_format` ("NCHW" or "NHWC"), channels last."""
    return x if data_format == "NHWC" else jnp.transpose(x, (0, 2, 3, 1))


def from_nhwc(y, data_format):
    """A channels-last 4-D result back in `data_format`."""
    return y if data_format == "NHWC" else jnp.transpose(y, (0, 3, 1, 2))


# ---- transposed convolutions ----------------------------------------------------------------
def transposed_filter(w, groups):
    """[in, out/g, *k] -> the [out, in/g, *k] filter of the equivalent direct conv, flipped in space."""
    cin, cout_g, *k = w.shape
    w = w.reshape(groups, cin // groups, cout_g, *k)
    w = jnp.swapaxes(w, 1, 2).reshape(groups * cout_g, cin // groups, *k)
    return jnp.flip(w, axis=tuple(range(2, w.ndim)))


def conv_transpose_nd(
    x, w, strides, paddings, output_padding, output_size, padding_algorithm, groups, dilations, data_format
):
    nd = w.ndim - 2
    in_sizes = spatial_shape(x, data_format)
    pads, dil = resolve_padding(paddings, dilations, padding_algorithm, in_sizes, strides, w.shape[2:])
    lo_hi = []
    for i in range(nd):
        extent = dil[i] * (w.shape[2 + i] - 1)
        natural = (in_sizes[i] - 1) * strides[i] - pads[i][0] - pads[i][1] + extent + 1
        if output_size:
            size = output_size[i]
        else:
            size = natural + (output_padding[i] if output_padding else 0)
        lo = extent - pads[i][0]
        # NOTE: the output length fixes the high-side pad; extra rows (output_padding/output_size)
        # receive no input, exactly as in Paddle's col2im.
        hi = size - 1 - (in_sizes[i] - 1) * strides[i] - lo + extent
        lo_hi.append((lo, hi))
    return lax.conv_general_dilated(
        x,
        transposed_filter(w.astype(x.dtype), groups),
        window_strides=(1,) * nd,
        padding=lo_hi,
        lhs_dilation=tuple(strides),
        rhs_dilation=tuple(dil),
        dimension_numbers=dimension_numbers(nd, data_format),
        feature_group_count=groups,
    )


@lowering("pd_op.conv2d_transpose", ignore=_IGNORED, amp="white")
@lowering("pd_op.depthwise_conv2d_transpose", ignore=_IGNORED)
def conv2d_transpose(
    x,
    w,
    output_size=None,
    *,
    strides,
    paddings,
    output_padding=(),
    padding_algorithm="EXPLICIT",
    groups=1,
    dilations=(),
    data_format="NCHW",
):
    size = static_ints(output_size) if output_size is not None else []
    return conv_transpose_nd(
        x, w, strides, paddings, output_padding, size, padding_algorithm, groups or 1, dilations, data_format
    )


@lowering("pd_op.conv3d_transpose", ignore=_IGNORED)
def conv3d_transpose(
    x,
    w,
    *,
    strides,
    paddings,
    output_padding=(),
    output_size=(),
    padding_algorithm="EXPLICIT",
    groups=1,
    dilations=(),
    data_format="NCHW",
):
    return conv_transpose_nd(
        x,
        w,
        strides,
        paddings,
        output_padding,
        list(output_size),
        padding_algorithm,
        groups or 1,
        dilations,
        data_format,
    )


# ---- deformable convolution (DCN v1 without mask, v2 with) -------------------------------------
def _bilinear_zero(img, y, x):
    """img: (N, G, C, H, W); y, x: (N, G, K, Ho, Wo) -> (N, G, C, K, Ho, Wo), zero outside."""
    n, g, c, h, w = img.shape
    y0, x0 = jnp.floor(y), jnp.floor(x)
    flat = img.reshape(n, g, c, h * w)
    out = 0
    for dy in (0, 1):
        for dx in (0, 1):
            yi, xi = y0 + dy, x0 + dx
            weight = (1 - jnp.abs(y - yi)) * (1 - jnp.abs(x - xi))
            inside = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)
            idx = (jnp.clip(yi, 0, h - 1) * w + jnp.clip(xi, 0, w - 1)).astype(jnp.int32)
            vals = jnp.take_along_axis(flat, idx.reshape(n, g, 1, -1), axis=3)
            vals = vals.reshape((n, g, c) + y.shape[2:])
            out = out + vals * jnp.where(inside, weight, 0)[:, :, None].astype(img.dtype)
    return out


@lowering("pd_op.deformable_conv")
def deformable_conv(x, offset, w, mask=None, *, strides, paddings, dilations, deformable_groups, groups, im2col_step=1):
    # NOTE: im2col_step only batches Paddle's own im2col; it does not change the result.
    n, c, _, _ = x.shape
    m, _, kh, kw = w.shape
    ho, wo = offset.shape[2:]
    dg, k = deformable_groups, kh * kw
    off = offset.reshape(n, dg, k, 2, ho, wo)
    ki, kj = jnp.divmod(jnp.arange(k), kw)
    base_y = (jnp.arange(ho) * strides[0] - paddings[0])[None, :, None] + (ki * dilations[0])[:, None, None]
    base_x = (jnp.arange(wo) * strides[1] - paddings[1])[None, None, :] + (kj * dilations[1])[:, None, None]
    y = base_y.astype(x.dtype) + off[:, :, :, 0]
    xx = base_x.astype(x.dtype) + off[:, :, :, 1]
    cols = _bilinear_zero(x.reshape(n, dg, c // dg, *x.shape[2:]), y, xx)  # N, dg, C/dg, K, Ho, Wo
    if mask is not None:
        cols = cols * mask.reshape(n, dg, 1, k, ho, wo)
    cols = cols.reshape(n, groups, c // groups, k, ho, wo)
    wg = w.reshape(groups, m // groups, c // groups, k)
    out = jnp.einsum("ngckhw,gmck->ngmhw", cols, wg.astype(x.dtype))
    return out.reshape(n, m, ho, wo)
