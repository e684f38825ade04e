"""Signal processing: frame (paddle.signal.frame, used by paddle.audio's STFT), the FFTs
(paddle.fft: fft_r2c, fft_c2c, fft_c2r) and the complex parts real / imag.

Paddle's FFT ops carry numpy's `norm` ("backward", "ortho", "forward") and a `forward` flag; the
inverse-direction variants (ihfft as r2c, hfft as c2r) are numpy's identities: a conjugate and the
norm's direction swapped."""

from __future__ import annotations

import jax.numpy as jnp

from .registry import lowering

_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


@lowering("pd_op.frame")
def frame(x, *, frame_length, hop_length, axis=-1):
    """Overlapping frames: axis=-1: [..., L] -> [..., frame_length, n]; axis=0: [L, ...] -> [n, frame_length, ...]."""
    length = x.shape[-1] if axis == -1 else x.shape[0]
    n = 1 + (length - frame_length) // hop_length
    idx = jnp.arange(frame_length)[:, None] + hop_length * jnp.arange(n)[None, :]  # [frame_length, n]
    return x[..., idx] if axis == -1 else x[idx.T]


@lowering("pd_op.fft_r2c")
def fft_r2c(x, *, axes, normalization, forward, onesided):
    axes = tuple(axes)
    if not onesided:
        full = jnp.fft.fftn if forward else jnp.fft.ifftn
        return full(x.astype(_complex(x.dtype)), axes=axes, norm=normalization)
    if forward:
        return jnp.fft.rfftn(x, axes=axes, norm=normalization)
    return jnp.conj(jnp.fft.rfftn(x, axes=axes, norm=_SWAP[normalization]))  # ihfft


@lowering("pd_op.fft_c2c")
def fft_c2c(x, *, axes, normalization, forward):
    return (jnp.fft.fftn if forward else jnp.fft.ifftn)(x, axes=tuple(axes), norm=normalization)


@lowering("pd_op.fft_c2r")
def fft_c2r(x, *, axes, normalization, forward, last_dim_size=0):
    axes = tuple(axes)
    last = last_dim_size or 2 * (x.shape[axes[-1]] - 1)
    sizes = [x.shape[a] for a in axes[:-1]] + [last]
    if forward:  # hfft
        return jnp.fft.irfftn(jnp.conj(x), s=sizes, axes=axes, norm=_SWAP[normalization])
    return jnp.fft.irfftn(x, s=sizes, axes=axes, norm=normalization)


@lowering("pd_op.real")
def real(x):
    return jnp.real(x)


@lowering("pd_op.imag")
def imag(x):
    return jnp.imag(x)


def _complex(dtype):
    return jnp.complex128 if dtype == jnp.float64 else jnp.complex64
