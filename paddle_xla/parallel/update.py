"""The optimizer step on each device: its stage's weights only, with Paddle's exact rule (train.optim).

Gradient clipping by global norm needs the norm over every stage's gradients: each stage sums its
squares, one psum over "stage" adds them up, and each stage scales its own. Other clips are per
tensor and stay local.

ZeRO-1 (shard_optimizer_state): each replica keeps 1/replicas of its stage's packed optimizer state.
For the update it all-gathers the state, runs the rule on whole tensors, and keeps its own slice.
NOTE: gathering, rather than updating a slice of each tensor, keeps every rule exact, including
Lamb's per-tensor trust ratio; what ZeRO-1 saves is the state held between steps."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax
import jax.numpy as jnp

from ..train import clip as clip_lib
from ..train import optim
from .context import Context, axis_index, by_stage, psum


def stage_configs(config: optim.OptimizerConfig, owned: tuple[tuple[str, ...], ...], shared: tuple[str, ...]):
    """Per stage: the optimizer config of its own and the shared weights, global-norm clips removed
    (applied across stages by `global_clip`)."""
    out = []
    for names in owned:
        keep = set(names) | set(shared)
        params = tuple((n, s) for n, s in config.params if n in keep)
        clips = tuple(None if isinstance(c, clip_lib.ClipGradByGlobalNorm) else c for c in config.group_clips)
        grad_clip = None if isinstance(config.grad_clip, clip_lib.ClipGradByGlobalNorm) else config.grad_clip
        out.append(dataclasses.replace(config, params=params, grad_clip=grad_clip, group_clips=clips))
    return tuple(out)


def _global_groups(config: optim.OptimizerConfig) -> list[tuple[int, clip_lib.ClipGradByGlobalNorm]]:
    groups = sorted({config.settings(n).group for n in config.trainable()})
    return [(g, clip) for g in groups if isinstance(clip := config.clip_of_group(g), clip_lib.ClipGradByGlobalNorm)]


def _scale_for(clip: clip_lib.ClipGradByGlobalNorm, norm):
    # NOTE: the formula of clip.global_norm_scale, fed a norm summed across stages.
    max_norm = jnp.float32(clip.clip_norm)
    if clip.auto_skip_clip:
        return jnp.where(norm > max_norm, max_norm / norm, jnp.float32(1.0))
    return max_norm / jnp.maximum(norm, max_norm)


def global_clip(ctx: Context, config, shared, grads_of) -> dict[str, jax.Array]:
    """name -> clip scale, for the weights in global-norm clip groups (empty when none)."""
    groups = _global_groups(config)
    if not groups:
        return {}
    s = axis_index(ctx, "stage")

    def squares(k):
        def f():
            g = grads_of(k)
            sums = []
            for group, _ in groups:
                names = [
                    n
                    for n in g
                    if n in config._by_name
                    and config.settings(n).group == group
                    and config.settings(n).need_clip
                    and config.settings(n).trainable
                ]
                # NOTE: a shared weight's gradient is on every stage; count it on stage 0 only.
                terms = [
                    jnp.sum(jnp.square(g[n].astype(jnp.float32))) * (1.0 if n not in shared else (s == 0))
                    for n in names
                ]
                sums.append(jnp.sum(jnp.stack(terms)) if terms else jnp.float32(0.0))
            return jnp.stack(sums)

        return f

    total = psum(ctx, by_stage(ctx, [squares(k) for k in range(ctx.stages)], s), "stage")
    scales = {}
    for j, (group, clip) in enumerate(groups):
        scale = _scale_for(clip, jnp.sqrt(total[j]))
        for n in config.trainable():
            st = config.settings(n)
            if st.group == group and st.need_clip:
                scales[n] = scale
    return scales


def apply(ctx: Context, config, configs, shared, P, Sh, O, Osh, gP, gSh, lr, zero: bool, accept=None):
    """New (P, Sh, O, Osh) after one optimizer step of this device's stage; `accept`: whether the
    caller will keep it (optim.apply)."""
    s = axis_index(ctx, "stage")
    if zero:
        # NOTE: along the last dimension: a tensor-split key is [T, width] (pack.py)
        O = {dt: jax.lax.all_gather(x, "replica", axis=x.ndim - 1, tiled=True) for dt, x in O.items()}

    def grads_of(k):
        return {**ctx.params[k].unpack(gP), **gSh}

    scales = global_clip(ctx, config, shared, grads_of) if ctx.stages > 1 else {}

    def step(k):
        def f(P, Sh, O, Osh, gP, gSh):
            params = {**ctx.params[k].unpack(P), **Sh}
            grads = {**ctx.params[k].unpack(gP), **gSh}
            grads = {n: g * scales[n].astype(g.dtype) if n in scales else g for n, g in grads.items()}
            state = {**ctx.opt[k].unpack(O), **Osh}
            cfg = configs[k] if ctx.stages > 1 else config
            new_p, new_s = optim.apply(cfg, params, grads, state, lr, accept)
            own_p = {n: new_p[n] for n in ctx.params[k].names()}
            own_s = {n: new_s[n] for n in ctx.opt[k].names()}
            return (
                ctx.params[k].pack(own_p, ctx.widths["params"]),
                {n: new_p[n] for n in Sh},
                ctx.opt[k].pack(own_s, ctx.widths["opt"]),
                {n: new_s[n] for n in Osh},
            )

        return f

    P, Sh, O, Osh = by_stage(ctx, [step(k) for k in range(ctx.stages)], s, P, Sh, O, Osh, gP, gSh)
    if zero:
        r = axis_index(ctx, "replica")
        O = {
            dt: jax.lax.dynamic_slice_in_dim(
                x, r * (x.shape[-1] // ctx.replicas), x.shape[-1] // ctx.replicas, axis=x.ndim - 1
            )
            for dt, x in O.items()
        }
    return P, Sh, O, Osh


def finite(*trees) -> jax.Array:
    leaves = [
        jnp.all(jnp.isfinite(x)) for t in trees for x in jax.tree.leaves(t) if jnp.issubdtype(x.dtype, jnp.inexact)
    ]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def select(ok, new: Mapping, old: Mapping):
    return jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, old)
