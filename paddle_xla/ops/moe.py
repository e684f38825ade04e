"""A mixture-of-experts block as one op (`paddle_xla.sparse_moe`, captured by capture/moe_layers.py):
dropless routing with grouped expert products, so compute follows the chosen experts rather than all of them.

Routing is the model's own, in float32, as its attributes say: scores are the softmax (Qwen MoE, ERNIE 4.5)
or the sigmoid (DeepSeek-V3) of the router logits; a correction bias, where the model has one, is added for
choosing experts only; group-limited routing (DeepSeek-V3: n_group groups scored by their two best experts,
the topk_group best kept) masks the other groups' experts to 0 before the top-k; ties go to the lower expert
(paddle.topk and lax.top_k agree). The k chosen scores, renormalised where norm_topk_prob (divided by
max(sum + norm_add, norm_min)), times routed_scaling, weight their experts' outputs.

Each token's k copies are sorted by expert and run through their experts' SwiGLU MLPs as `lax.ragged_dot`
products (one group per expert), scaled by their weights and added back per token in expert order, the
order of the models' loops of index_add over experts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from .registry import lowering


def scores_of(router_logits, scoring: str):
    logits = router_logits.astype(jnp.float32)
    if scoring == "softmax":
        return jax.nn.softmax(logits, axis=-1)
    if scoring == "sigmoid":
        return jax.nn.sigmoid(logits)
    raise ValueError(f"paddle_xla.sparse_moe scores experts by 'softmax' or 'sigmoid', not {scoring!r}")


def _group_limited(choice, n_group: int, topk_group: int):
    """DeepSeek-V3's group-limited choice: experts outside the topk_group best groups (a group scored by the
    sum of its two best) are set to 0, as the model's masked_fill does."""
    tokens, experts = choice.shape
    grouped = choice.reshape(tokens, n_group, experts // n_group)
    group_scores = jnp.sum(lax.top_k(grouped, 2)[0], axis=-1)
    kept = lax.top_k(group_scores, topk_group)[1]
    keep = jnp.zeros((tokens, n_group), bool).at[jnp.arange(tokens)[:, None], kept].set(True)
    return jnp.where(jnp.repeat(keep, experts // n_group, axis=1), choice, 0.0)


def route(
    router_logits,
    top_k: int,
    norm_topk_prob: bool,
    bias=None,
    scoring: str = "softmax",
    norm_add: float = 0.0,
    norm_min: float = 0.0,
    routed_scaling: float = 1.0,
    n_group: int = 1,
    topk_group: int = 1,
):
    """(weights [T, k] float32, experts [T, k] int32) of the model's routing (the module docstring)."""
    scores = scores_of(router_logits, scoring)
    choice = scores if bias is None else scores + bias.astype(jnp.float32)[None, :]
    if n_group > 1:
        choice = _group_limited(choice, n_group, topk_group)
    experts = lax.top_k(choice, top_k)[1]
    weights = jnp.take_along_axis(scores, experts, axis=-1)
    if norm_topk_prob:
        weights = weights / jnp.maximum(jnp.sum(weights, axis=-1, keepdims=True) + norm_add, norm_min)
    return weights * routed_scaling, experts.astype(jnp.int32)


def grouped_swiglu(rows, gate_up, down, group_sizes):
    """Each group's rows through its own expert: silu(gate) * up, then down ([E, H, 2I] and [E, I, H])."""
    both = lax.ragged_dot(rows, gate_up, group_sizes)
    gate, up = jnp.split(both, 2, axis=-1)
    return lax.ragged_dot(jax.nn.silu(gate) * up, down, group_sizes)


def _stacked_experts(weights, fused_gate_up: bool):
    """[E, H, 2I] gate|up and [E, I, H] down from each expert's weights: (gate|up, down) or (gate, up, down)."""
    if fused_gate_up:
        return jnp.stack(weights[0::2]), jnp.stack(weights[1::2])
    gate_up = [jnp.concatenate([g, u], axis=-1) for g, u in zip(weights[0::3], weights[1::3])]
    return jnp.stack(gate_up), jnp.stack(weights[2::3])


@lowering("paddle_xla.sparse_moe")
def sparse_moe(
    x,
    gate_w,
    *weights,
    num_experts,
    top_k,
    norm_topk_prob,
    scoring,
    norm_add,
    norm_min,
    routed_scaling,
    n_group,
    topk_group,
    fused_gate_up,
    correction_bias,
):
    """x [..., H] (T tokens), the router's gate_w [H, E], its correction bias [E] where correction_bias, then each
    expert's weights: (gate|up [H, 2I], down [I, H]) where fused_gate_up, else (gate [H, I], up [H, I], down)
    -> (the routed output [T, H], the router logits [T, E] in float32). Routing attributes: route()'s."""
    x = x.reshape(-1, x.shape[-1])
    # NOTE: ERNIE 4.5 keeps one bias row per modality ([1, E] for text): the first row is the text's
    bias, weights = (weights[0].reshape(-1, num_experts)[0], weights[1:]) if correction_bias else (None, weights)
    router_logits = jnp.matmul(x.astype(gate_w.dtype), gate_w)
    chosen_weights, experts = route(
        router_logits, top_k, norm_topk_prob, bias, scoring, norm_add, norm_min, routed_scaling, n_group, topk_group
    )
    flat = experts.reshape(-1)
    order = jnp.argsort(flat, stable=True)
    token = order // top_k
    sizes = jnp.bincount(flat, length=num_experts).astype(jnp.int32)
    gate_up, down = _stacked_experts(weights, fused_gate_up)
    out = grouped_swiglu(x[token], gate_up, down, sizes)
    out = out * chosen_weights.reshape(-1)[order].astype(x.dtype)[:, None]
    routed = jnp.zeros_like(x).at[token].add(out)
    return routed, router_logits
