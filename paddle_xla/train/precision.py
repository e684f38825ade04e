"""fp16 loss scaling, as paddle.amp.GradScaler does it.

The loss is multiplied by `scale` before the backward pass and the gradients divided by it; a step
with a non-finite gradient is skipped and the scale multiplied by `backoff_factor`; after
`growth_interval` clean steps in a row it is multiplied by `growth_factor`. (Half-precision compute
itself is a lowering choice: half.py, chosen by policy.LoweringPolicy.) Paddle-free."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp


# ---- dynamic loss scaling -----------------------------------------------------------------------
@dataclass(frozen=True)
class ScalerConfig:
    init: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int
    dynamic: bool = True


def scaler_init(cfg: ScalerConfig | None) -> dict[str, jax.Array]:
    """The loss-scale state: scale, clean steps in a row, steps skipped so far."""
    scale = cfg.init if cfg is not None else 1.0
    return {"scale": jnp.float32(scale), "good": jnp.int32(0), "skipped": jnp.int32(0)}


def scaler_update(cfg: ScalerConfig | None, state: Mapping, finite) -> dict[str, jax.Array]:
    """Paddle's update_loss_scaling with decr_every_n_nan_or_inf=1."""
    if cfg is None:
        return dict(state)
    skipped = state["skipped"] + jnp.where(finite, 0, 1).astype(jnp.int32)
    if not cfg.dynamic:
        return {**state, "skipped": skipped}
    good = jnp.where(finite, state["good"] + 1, 0)
    grow = good >= cfg.growth_interval
    grown = state["scale"] * jnp.float32(cfg.growth_factor)
    # NOTE: as Paddle's kernel: a grown scale that overflows is not taken; a lowered one stays >= 1.
    grown = jnp.where(jnp.isfinite(grown), grown, state["scale"])
    lowered = jnp.maximum(state["scale"] * jnp.float32(cfg.backoff_factor), jnp.float32(1.0))
    scale = jnp.where(finite, jnp.where(grow, grown, state["scale"]), lowered)
    return {"scale": scale, "good": jnp.where(grow, 0, good).astype(jnp.int32), "skipped": skipped}
