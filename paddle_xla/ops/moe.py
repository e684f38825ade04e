"""A mixture-of-experts block as one op (`paddle_xla.sparse_moe`, captured by capture/moe_layers.py):
dropless routing with grouped expert products, so compute follows the chosen experts rather than all of them.

Routing is Paddle's (PaddleFormers' Qwen MoE blocks): softmax over the router logits in float32, top-k (ties
to the lower expert, as paddle.topk and lax.top_k both break them), the k weights divided by their sum where
norm_topk_prob, then cast to the hidden dtype. Each token's k copies are sorted by expert, run through their
experts' SwiGLU MLPs as two `lax.ragged_dot` products (one group per expert), scaled by their weights and
added back per token in expert order, the order of Paddle's loop of index_add over experts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from .registry import lowering


def route(router_logits, top_k: int, norm_topk_prob: bool):
    """(weights [T, k] float32, experts [T, k] int32): Paddle's softmax, top-k and optional renormalisation."""
    probs = jax.nn.softmax(router_logits.astype(jnp.float32), axis=-1)
    weights, experts = lax.top_k(probs, top_k)
    if norm_topk_prob:
        weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    return weights, experts.astype(jnp.int32)


def grouped_swiglu(rows, gate_up, down, group_sizes):
    """Each group's rows through its own expert: silu(gate) * up, then down ([E, H, 2I] and [E, I, H])."""
    both = lax.ragged_dot(rows, gate_up, group_sizes)
    gate, up = jnp.split(both, 2, axis=-1)
    return lax.ragged_dot(jax.nn.silu(gate) * up, down, group_sizes)


@lowering("paddle_xla.sparse_moe")
def sparse_moe(x, gate_w, *expert_weights, num_experts, top_k, norm_topk_prob):
    """x [..., H] (T tokens), the router's gate_w [H, E], then each expert's fused gate|up [H, 2I] and down
    [I, H] weights -> (the routed output [T, H], the router logits [T, E])."""
    x = x.reshape(-1, x.shape[-1])
    router_logits = jnp.matmul(x.astype(gate_w.dtype), gate_w)
    weights, experts = route(router_logits, top_k, norm_topk_prob)
    flat = experts.reshape(-1)
    order = jnp.argsort(flat, stable=True)
    token = order // top_k
    sizes = jnp.bincount(flat, length=num_experts).astype(jnp.int32)
    gate_up = jnp.stack(expert_weights[0::2])
    down = jnp.stack(expert_weights[1::2])
    out = grouped_swiglu(x[token], gate_up, down, sizes)
    out = out * weights.reshape(-1)[order].astype(x.dtype)[:, None]
    routed = jnp.zeros_like(x).at[token].add(out)
    return routed, router_logits
