"""The training step as one pure function: forward, loss, grads (jax.value_and_grad), update.

Paddle-free. The optimizer arrives as one pure callable, update(params, grads, state, lr, accept) (the
caller binds train.optim.apply to a Paddle-free optimizer config), so this module knows nothing of the
update rule; the state it updates comes from train.optim.init_state."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from ..graph import Graph
from ..lowering.lower import lower

# (params, grads, state, lr, accept): accept is the traced keep-or-drop flag of the step (optim.apply)
UpdateFn = Callable[[dict, dict, Any, jax.Array, jax.Array], tuple[dict, Any]]

# NOTE: XLA's CPU pipeline turns optimization barriers into no-ops early (cse_barrier_expander);
# the update's barrier (optim._select_early) and jax.checkpoint's only hold with the pass off.
STEP_COMPILER_OPTIONS = {"xla_disable_hlo_passes": "cse_barrier_expander"}


@dataclass
class TrainState:
    params: dict[str, jax.Array]
    buffers: dict[str, jax.Array]
    opt_state: Any
    step: int
    key: jax.Array


def split_weights(graph: Graph, weights: Mapping[str, Any]) -> tuple[dict, dict]:
    """Trainable parameters and buffers (running statistics, frozen weights)."""
    params = {p.name: jnp.asarray(weights[p.name]) for p in graph.params if p.trainable}
    buffers = {p.name: jnp.asarray(weights[p.name]) for p in graph.params if not p.trainable}
    return params, buffers


def loss_value(fetch) -> jax.Array:
    """A scalar loss. A non-scalar one is summed, as Paddle's backward() seeds it with ones."""
    return jnp.sum(fetch.astype(jnp.float32)) if fetch.ndim else fetch.astype(jnp.float32)


def make_grads(graph: Graph, loss_index: int = 0, forward: Callable | None = None):
    """grads(params, buffers, feeds, key, *accumulated) -> (loss, fetches, buffers, grads): the backward
    pass alone, its gradients added to `accumulated` when given (Paddle's loss.backward() adds into .grad).
    `forward`: the lowered program (default lower(graph), float32)."""
    forward = forward or lower(graph)

    def loss_fn(params, buffers, feeds, key):
        fetches, new_buffers = forward(params, buffers, feeds, key)
        return loss_value(fetches[loss_index]), (fetches, new_buffers)

    def grads_fn(params, buffers, feeds, key, *accumulated):
        (loss, (fetches, new_buffers)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, buffers, feeds, key)
        if accumulated:
            grads = jax.tree.map(jnp.add, grads, accumulated[0])
        return loss, fetches, {**buffers, **new_buffers}, grads

    return grads_fn


def make_step(graph: Graph, update: UpdateFn, loss_index: int = 0, forward: Callable | None = None):
    """step(params, buffers, opt_state, feeds, key, lr, *accumulated) -> (params, buffers, opt_state, loss,
    fetches, finite); `accumulated`: gradients of earlier backward passes, added to this one's;
    `forward` as in make_grads.

    A step whose loss or gradients are not finite leaves params and optimizer state as they were,
    so a NaN never reaches the weights; the host reports it. So does a step where a Paddle assert of
    the program is false: a forward lowered with checks=True appends their flags to the fetches."""
    grads_fn = make_grads(graph, loss_index, forward)
    n = len(graph.fetches)

    def step(params, buffers, opt_state, feeds, key, lr, *accumulated):
        loss, fetches, new_buffers, grads = grads_fn(params, buffers, feeds, key, *accumulated)
        finite = jnp.isfinite(loss) & all_finite(grads)
        for flag in fetches[n:]:
            finite = finite & flag
        new_params, new_opt_state = update(params, grads, opt_state, lr, finite)
        keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)  # noqa: E731
        return keep(new_params, params), new_buffers, keep(new_opt_state, opt_state), loss, fetches, finite

    return step


def all_finite(tree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def not_finite_message(step: int, loss: float) -> str:
    """What a step whose loss or gradient is not finite says (it keeps the weights it had)."""
    return (
        f"The loss or a gradient is not finite at step {step} (loss = {loss}); the weights and "
        "optimizer state were left as they were before this step. Lower the learning rate, check "
        "the inputs for NaN/Inf, or use precision='fp16' loss scaling, which skips such steps."
    )
