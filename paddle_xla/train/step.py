"""The training step as one pure function: forward, loss, grads (jax.value_and_grad), update.

Paddle-free. The optimizer arrives as two pure callables (init, update) built by train.optim from a
Paddle-free optimizer config, so this module knows nothing of the update rule."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp

from ..graph import Graph
from ..lower import lower

UpdateFn = Callable[[dict, dict, Any, jax.Array], tuple[dict, Any]]   # (params, grads, state, lr)


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


def make_step(graph: Graph, update: UpdateFn, loss_index: int = 0):
    """step(params, buffers, opt_state, feeds, key, lr) -> (params, buffers, opt_state, loss, fetches, finite).

    A step whose loss or gradients are not finite leaves params and optimizer state as they were,
    so a NaN never reaches the weights; the host reports it."""
    forward = lower(graph)

    def loss_fn(params, buffers, feeds, key):
        fetches, new_buffers = forward(params, buffers, feeds, key)
        return loss_value(fetches[loss_index]), (fetches, new_buffers)

    def step(params, buffers, opt_state, feeds, key, lr):
        (loss, (fetches, new_buffers)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, buffers, feeds, key)
        finite = jnp.isfinite(loss) & all_finite(grads)
        new_params, new_opt_state = update(params, grads, opt_state, lr)
        keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)  # noqa: E731
        buffers = {**buffers, **new_buffers}
        return keep(new_params, params), buffers, keep(new_opt_state, opt_state), loss, fetches, finite

    return step


def all_finite(tree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)
