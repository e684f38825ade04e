"""Depthwise convolution (one group per input channel) as a sum of shifted, scaled copies of the input.

XLA:CPU's convolution emitter runs feature_group_count = C about one channel at a time: eight 5x5
depthwise convolutions of 4x96x40x40 take 20 ms that way against 0.65 ms as 25 multiply-adds over
strided slices, which XLA fuses into one loop (1x192x40x40 3x3: 26 -> 1.0 ms; 4x32x112x112 3x3:
33 -> 0.9 ms). The taps are summed in the filter's row-major order, accumulating in float32 at least,
the order of Paddle's CPU kernel (im2col then GEMM over kh, kw). Only kernels.py chooses this form, and
only for XLA:CPU: cuDNN and TPU convolutions are the better kernels there.

The same form serves a convolution of few input channels into few output channels, a network's RGB stem:
each output pixel is at most 36 products, summed over (channel, kh, kw) like Paddle's im2col, and one
fused loop over the channels-last output beats XLA:CPU's convolution emitter 2-4x (8x3x224² 3x3
stride 2 into 16 channels, 1 core: 4.1 -> 1.7 ms; into 8: 3.7 -> 0.9 ms; into 32: 5.6 -> 2.6 ms). With
64 output channels or a 7x7 window (ResNet's stem) the emitter wins (7.9 ms against 68), hence the
bounds. Paddle-free."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .conv import channel_last, resolve_padding, spatial_shape


def is_depthwise(x, w, *, groups=1, data_format="NCHW", hwio=False, **_other_attrs) -> bool:
    """A 2-D convolution with one group per input channel (a channel multiplier is allowed)."""
    if getattr(x, "ndim", 0) != 4 or getattr(w, "ndim", 0) != 4 or data_format not in ("NCHW", "NHWC"):
        return False
    channels = x.shape[3] if channel_last(data_format) else x.shape[1]
    per_group_in = w.shape[2] if hwio else w.shape[1]
    return (groups or 1) == channels > 1 and per_group_in == 1


def depthwise_by_shifts(
    x, w, *, hwio=False, strides, paddings, padding_algorithm="EXPLICIT", dilations=(), groups=1, data_format="NCHW"
):
    """conv(x, w) for a depthwise filter, OIHW [C*m, 1, kh, kw] (or HWIO [kh, kw, 1, C*m] when hwio)."""
    taps = w[:, :, 0, :] if hwio else jnp.transpose(w[:, 0], (1, 2, 0))  # [kh, kw, C*m]
    kh, kw, out_channels = taps.shape
    c_axis = _channel_axis(data_format)
    multiplier = out_channels // x.shape[c_axis]
    if multiplier > 1:
        # NOTE: output channel c*m + k reads input channel c (Paddle's group order).
        x = jnp.repeat(x, multiplier, axis=c_axis)
    acc = jnp.promote_types(x.dtype, jnp.float32)
    total = None
    for (i, j), window in _tap_windows(x, kh, kw, strides, paddings, padding_algorithm, dilations, data_format):
        term = window.astype(acc) * _per_channel(taps[i, j].astype(acc), c_axis)
        total = term if total is None else total + term
    return total.astype(jnp.result_type(x.dtype, w.dtype))


# NOTE: the measured bounds of the narrow form (module docstring): products per output, output channels
NARROW_PRODUCTS, NARROW_OUT_CHANNELS = 36, 32


def is_narrow(x, w, *, groups=1, data_format="NCHW", hwio=False, **_other_attrs) -> bool:
    """A 2-D convolution of one group with a window wider than 1x1, each output a sum of at most 36 products,
    into at most 32 channels. (A 1x1 convolution is a GEMM, and faster as one: 8x56²x32 -> 32 0.29 ms against
    0.72 as products.)"""
    if getattr(x, "ndim", 0) != 4 or getattr(w, "ndim", 0) != 4 or data_format not in ("NCHW", "NHWC"):
        return False
    kh, kw, cin, cout = w.shape if hwio else (*w.shape[2:], w.shape[1], w.shape[0])
    return (groups or 1) == 1 and kh * kw > 1 and cin * kh * kw <= NARROW_PRODUCTS and cout <= NARROW_OUT_CHANNELS


def narrow_conv_by_shifts(
    x, w, *, hwio=False, strides, paddings, padding_algorithm="EXPLICIT", dilations=(), groups=1, data_format="NCHW"
):
    """conv(x, w) for a narrow filter (is_narrow), OIHW [O, C, kh, kw] (or HWIO when hwio)."""
    taps = w if hwio else jnp.transpose(w, (2, 3, 1, 0))  # [kh, kw, C, O]
    kh, kw, channels, _ = taps.shape
    c_axis = _channel_axis(data_format)
    acc = jnp.promote_types(x.dtype, jnp.float32)
    windows = _tap_windows(x, kh, kw, strides, paddings, padding_algorithm, dilations, data_format)
    total = None
    for c in range(channels):
        for (i, j), window in windows:
            term = lax.slice_in_dim(window, c, c + 1, axis=c_axis).astype(acc) * _per_channel(
                taps[i, j, c].astype(acc), c_axis
            )
            total = term if total is None else total + term
    return total.astype(jnp.result_type(x.dtype, w.dtype))


def _channel_axis(data_format):
    return 3 if channel_last(data_format) else 1


def _tap_windows(x, kh, kw, strides, paddings, padding_algorithm, dilations, data_format):
    """[((i, j), the input pixels tap (i, j) meets at every output position)] in row-major tap order,
    after the convolution's padding."""
    h_axis, w_axis = (1, 2) if channel_last(data_format) else (2, 3)
    pads, dil = resolve_padding(
        paddings, dilations, padding_algorithm, spatial_shape(x, data_format), strides, (kh, kw)
    )
    padded = _pad_spatial(x, pads, h_axis, w_axis)
    out_hw = [
        (padded.shape[a] - d * (k - 1) - 1) // s + 1 for a, k, d, s in zip((h_axis, w_axis), (kh, kw), dil, strides)
    ]
    return [
        ((i, j), _window(padded, (i * dil[0], j * dil[1]), out_hw, strides, h_axis, w_axis))
        for i in range(kh)
        for j in range(kw)
    ]


def _pad_spatial(x, pads, h_axis, w_axis):
    config = [(0, 0, 0)] * x.ndim
    config[h_axis], config[w_axis] = (*pads[0], 0), (*pads[1], 0)
    # NOTE: lax.pad takes negative pads too (Paddle's asymmetric SAME can crop).
    return lax.pad(x, jnp.zeros((), x.dtype), config)


def _window(padded, offset, out_hw, strides, h_axis, w_axis):
    """The input pixels tap (i, j) meets at every output position."""
    start, limit, step = [0] * padded.ndim, list(padded.shape), [1] * padded.ndim
    for a, o, n, s in zip((h_axis, w_axis), offset, out_hw, strides):
        start[a], limit[a], step[a] = o, o + (n - 1) * s + 1, s
    return lax.slice(padded, start, limit, step)


def _per_channel(v, c_axis):
    shape = [1, 1, 1, 1]
    shape[c_axis] = v.shape[0]
    return v.reshape(shape)
