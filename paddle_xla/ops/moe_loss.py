"""ERNIE 4.5 MoE's router loss, and the way it reaches the gradient (ops/moe.py's sparse_moe, in training).

PaddleFormers' ERNIE 4.5 MoE adds, per MoE layer, router_aux_loss_coef * l_aux + moe_orthogonal_loss_lambda
* l_orth + router_z_loss_coef * l_z (MOELayer._calc_router_loss, TopKGate's _cal_* methods), each in float32:
- l_aux = E * sum_e (c_e / S) * (sum_s p[s, e] / S): p the scores (the softmax, or the sigmoid divided by its
  row sum), c_e how many of the S tokens have expert e among the top-k of p (the scores without the
  correction bias; a count, so no gradient passes through it);
- l_z = mean_s logsumexp(logits[s])^2;
- l_orth = ||W W^T - I||_F^2 / E^2, W the gate's [E, H] rows each divided by max(its norm, 1e-12).
That loss never enters the loss value the model returns: FakeMoERouterLoss passes the hidden states through
unchanged and gives the router loss the constant gradient 1 (1 / num_acc_steps without
enable_delay_scale_loss) in the backward pass. `with_loss_gradient` does the same to the op's output.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax


def aux_loss(router_logits, scoring: str, top_k: int):
    logits = router_logits.astype(jnp.float32)
    if scoring == "sigmoid":
        scores = jax.nn.sigmoid(logits)
        scores = scores / jnp.sum(scores, axis=-1, keepdims=True)
    else:
        scores = jax.nn.softmax(logits, axis=-1)
    tokens, experts = scores.shape
    chosen = lax.top_k(scores, top_k)[1].reshape(-1)
    counts = lax.stop_gradient(jnp.bincount(chosen, length=experts).astype(jnp.float32))
    return jnp.sum((jnp.sum(scores, axis=0) / tokens) * (counts / tokens)) * experts


def z_loss(router_logits):
    return jnp.mean(jnp.square(jax.nn.logsumexp(router_logits.astype(jnp.float32), axis=-1)))


def orthogonal_loss(gate_w):
    rows = gate_w.astype(jnp.float32).T
    rows = rows / jnp.maximum(jnp.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    off = rows @ rows.T - jnp.eye(rows.shape[0], dtype=jnp.float32)
    return jnp.sum(jnp.square(off)) / off.size


def router_loss(router_logits, gate_w, scoring: str, top_k: int, aux_coef: float, z_coef: float, orth_coef: float):
    """The sum of the three terms the coefficients ask for (a coefficient of 0 leaves its term out, as Paddle's
    `if config.router_aux_loss_coef:` does)."""
    total = jnp.zeros((), jnp.float32)
    if aux_coef:
        total = total + jnp.float32(aux_coef) * aux_loss(router_logits, scoring, top_k)
    if orth_coef:
        total = total + jnp.float32(orth_coef) * orthogonal_loss(gate_w)
    if z_coef:
        total = total + jnp.float32(z_coef) * z_loss(router_logits)
    return total


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def with_loss_gradient(x, loss, grad: float):
    """x unchanged; in the backward pass `loss` receives the constant gradient `grad` (FakeMoERouterLoss)."""
    return x


def _forward(x, loss, grad):
    return x, loss


def _backward(grad, loss, d_x):
    return d_x, jnp.full_like(loss, grad)


with_loss_gradient.defvjp(_forward, _backward)
