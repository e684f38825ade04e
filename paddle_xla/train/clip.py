"""Gradient clipping with the exact formulas of `paddle.nn.ClipGradBy*`, without Paddle.

Paddle clips first and adds regularization terms to the clipped gradients afterwards (see
`optim.apply`). Only parameters whose `need_clip` is True are clipped, and only they count in the
global norm. Where optax has a near match, the numbers still differ:

- ClipGradByGlobalNorm: scale = clip_norm / max(global_norm, clip_norm), applied always, so a
  gradient inside the norm is multiplied by exactly 1.0. optax.clip_by_global_norm uses
  `where(norm < max, g, g / norm * max)`. With `auto_skip_clip=True` Paddle scales by
  clip_norm / global_norm only when global_norm > clip_norm.
- ClipGradByNorm (per tensor): scale = 1 if norm <= clip_norm else clip_norm / (norm + e), where
  e = 1e-6 only when norm <= 1e-30. optax has no per-tensor norm clip.
- ClipGradByValue: clip to [min, max]; min defaults to -max (optax.clip only has symmetric bounds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp


@dataclass(frozen=True)
class ClipGradByGlobalNorm:
    clip_norm: float
    auto_skip_clip: bool = False


@dataclass(frozen=True)
class ClipGradByNorm:
    clip_norm: float


@dataclass(frozen=True)
class ClipGradByValue:
    max: float
    min: float | None = None

    def __post_init__(self):
        if self.min is None:
            object.__setattr__(self, "min", -float(self.max))


Clip = ClipGradByGlobalNorm | ClipGradByNorm | ClipGradByValue
CLIPS: dict[str, type] = {c.__name__: c for c in (ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue)}


def clip_grads(
    clip: Clip | None, grads: Mapping[str, jax.Array], need_clip: Mapping[str, bool]
) -> dict[str, jax.Array]:
    """Clip `grads` (one clip group) as Paddle does. `need_clip[name]` False leaves a gradient alone."""
    grads = dict(grads)
    clipped = [n for n in grads if need_clip.get(n, True)]
    if clip is None or not clipped:
        return grads
    if isinstance(clip, ClipGradByGlobalNorm):
        scale = global_norm_scale(clip, [grads[n] for n in clipped])
        return {**grads, **{n: (grads[n] * scale.astype(grads[n].dtype)) for n in clipped}}
    if isinstance(clip, ClipGradByNorm):
        return {**grads, **{n: clip_by_norm(grads[n], clip.clip_norm) for n in clipped}}
    if isinstance(clip, ClipGradByValue):
        return {**grads, **{n: jnp.clip(grads[n], clip.min, clip.max) for n in clipped}}
    raise TypeError(f"unknown gradient clip {clip!r}; expected one of {sorted(CLIPS)}")


def global_norm(grads: list[jax.Array]) -> jax.Array:
    """sqrt of the sum of per-tensor squared L2 norms, summed in float32 as Paddle does."""
    # NOTE: Paddle sums each tensor's squares, stacks the per-tensor sums and sums those.
    squares = jnp.stack([jnp.sum(jnp.square(g.astype(jnp.float32))) for g in grads])
    return jnp.sqrt(jnp.sum(squares))


def global_norm_scale(clip: ClipGradByGlobalNorm, grads: list[jax.Array]) -> jax.Array:
    norm = global_norm(grads)
    max_norm = jnp.float32(clip.clip_norm)
    if clip.auto_skip_clip:
        return jnp.where(norm > max_norm, max_norm / norm, jnp.float32(1.0))
    return max_norm / jnp.maximum(norm, max_norm)


def clip_by_norm(g: jax.Array, max_norm: float) -> jax.Array:
    """Paddle's clip_by_norm kernel on one tensor."""
    norm = jnp.sqrt(jnp.sum(jnp.square(g)))
    limit = jnp.asarray(max_norm, g.dtype)
    eps = jnp.where(norm <= 1e-30, jnp.asarray(1e-6, g.dtype), jnp.asarray(0, g.dtype))
    scale = jnp.where(norm <= limit, jnp.asarray(1, g.dtype), limit / (norm + eps))
    return g * scale
