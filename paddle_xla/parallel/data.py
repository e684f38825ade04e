"""One stage: data parallelism and gradient accumulation, per device inside shard_map.

Each replica takes its slice of the global batch and runs `micro_batches` forward/backward passes in
a lax.scan, adding the gradients up (gradient accumulation: the memory of one micro-batch). The
loss of each micro-batch is weighted by 1/groups for a mean loss (groups = replicas x micro-batches,
all of equal size), so the sum over groups is the whole batch's mean and its gradient; a summed loss
keeps weight 1. The caller then sums over replicas (one all-reduce per step, not per micro-batch).

BatchNorm in train mode normalises each micro-batch with its own statistics, as on one Paddle-IPU
replica; the running statistics written back are the mean of each group's update from the step's
starting values. A layout therefore depends only on the number of groups: replicas=4 with
micro_batches=2 computes what one device computes with micro_batches=8."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .context import Context, loss_of, scan, stage_forward, zeros_like_tree

GATHERED = "px_gathered_weight"  # checkpoint_name of a weight gathered from its sharding=3 slices


def accumulate(ctx: Context, P, Sh, B, feeds, keys, scale):
    """(loss, (grad P, grad Sh), fetches [M, ...], buffers) of this replica's micro-batches."""

    def loss_fn(P, Sh, f, k):
        # NOTE: with sharding=3 the weights arrive as this replica's slices and are gathered here, inside
        # the differentiated function: the gradient of each gather is a reduce-scatter, so each replica
        # gets back the summed gradient of its own slice.
        weights = ctx.weights_in(P) if ctx.weights_in is not None else P
        outs, newB = stage_forward(ctx, 0, weights, Sh, B, f, k)
        loss = loss_of(outs[0]) * jnp.float32(ctx.loss_weight)
        return loss * scale, (loss, tuple(outs[1:]), newB)

    if ctx.recompute in ("full", "stage"):
        # NOTE: rematerialising the whole micro-batch saves little (the backward pass rebuilds all
        # of it at once); "layer" is what bounds activation memory on one stage.
        loss_fn = jax.checkpoint(loss_fn, prevent_cse=False)
    if ctx.weights_in is not None:
        # NOTE: the gathered weights are not kept for the backward pass; it gathers them again (FSDP).
        loss_fn = jax.checkpoint(
            loss_fn, prevent_cse=False, policy=jax.checkpoint_policies.save_anything_except_these_names(GATHERED)
        )
    grad = jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)

    def micro(carry, xs):
        gP, gSh, total, bsum = carry
        f, k = xs
        (_, (loss, fetch, newB)), (dP, dSh) = grad(P, Sh, f, k)
        add = lambda a, b: jax.tree.map(jnp.add, a, b)  # noqa: E731
        return (add(gP, dP), add(gSh, dSh), total + loss, add_buffers(bsum, newB)), fetch

    init = (zeros_like_tree(P), zeros_like_tree(Sh), jnp.float32(0.0), zeros_like_tree(B))
    (gP, gSh, loss, bsum), fetches = scan(micro, init, (feeds, keys))
    return loss, (gP, gSh), fetches, mean_buffers(bsum, ctx.micro_batches)


def add_buffers(acc, new):
    """Float buffers (running statistics) add up, to be averaged; others (counters) keep the last."""
    return {dt: acc[dt] + new[dt] if jnp.issubdtype(new[dt].dtype, jnp.floating) else new[dt] for dt in new}


def mean_buffers(total, n: int):
    return {dt: x / jnp.asarray(n, x.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x for dt, x in total.items()}
