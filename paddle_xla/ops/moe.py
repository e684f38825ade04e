"""A mixture-of-experts block as one op (`paddle_xla.sparse_moe`, captured by capture/moe_layers.py):
dropless routing with grouped expert products, so compute follows the chosen experts rather than all of them.

Routing is the model's own, in float32, as its attributes say: scores are the softmax (Qwen MoE, ERNIE 4.5)
or the sigmoid (DeepSeek-V3) of the router logits; a correction bias, where the model has one, is added for
choosing experts only; group-limited routing (DeepSeek-V3: n_group groups scored by their two best experts,
the topk_group best kept) masks the other groups' experts to 0 before the top-k; ties go to the lower expert
(paddle.topk and lax.top_k agree). The k chosen scores, renormalised where norm_topk_prob (divided by
max(sum + norm_add, norm_min)), times routed_scaling, weight their experts' outputs.

Each token's k copies are sorted by expert and run through their experts' SwiGLU MLPs tile by tile
(grouped_swiglu), scaled by their weights and added back per token in expert order, the order of the
models' loops of index_add over experts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from .moe_loss import router_loss, with_loss_gradient
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


def _projected(rows, *weights):
    """gate|up pre-activations [rows, 2I]: weights (gate|up [H, 2I]) or (gate [H, I], up [H, I])."""
    if len(weights) == 1:
        return rows @ weights[0]
    return jnp.concatenate([rows @ weights[0], rows @ weights[1]], axis=-1)


def _activated(pre, down):
    """silu(gate) * up, then down [I, H]."""
    gate, up = jnp.split(pre, 2, axis=-1)
    return (jax.nn.silu(gate) * up) @ down


def _swiglu(rows, *weights):
    """An expert's SwiGLU MLP: weights (gate|up [H, 2I], down [I, H]) or (gate, up, down)."""
    return _activated(_projected(rows, *weights[:-1]), weights[-1])


def _tile_rows(rows_count: int, experts: int) -> int:
    """Rows per tile: about a group's share of the rows, a power of two in [8, 128] (a decode step's few rows
    use small tiles, so a tile reads one expert's weights for few rows; a prompt's many rows use large ones)."""
    share = -(-rows_count // experts)
    return int(min(128, max(8, 1 << (share - 1).bit_length())))


def _tiles(groups, n: int, count: int):
    """The tiled layout of rows sorted by group: (tile rows, tile count, each row's place in the padded
    buffer, each tile's group: `count` for the unused tiles of the static bound)."""
    tile = _tile_rows(n, count)
    tiles = -(-n // tile) + count  # NOTE: each group wastes under one tile
    sizes = jnp.bincount(groups, length=count)
    padded = -(-sizes // tile) * tile
    padded_end = jnp.cumsum(padded)
    position = (padded_end - padded)[groups] + jnp.arange(n) - (jnp.cumsum(sizes) - sizes)[groups]
    tile_group = jnp.searchsorted(padded_end, jnp.arange(tiles) * tile, side="right")
    return tile, tiles, position, tile_group


def _tiled(rows, position, tile: int, tiles: int):
    buffer = jnp.zeros((tiles * tile, rows.shape[1]), rows.dtype).at[position].set(rows)
    return buffer.reshape(tiles, tile, rows.shape[1])


def _grouped_forward(rows, groups, experts, keep: bool = False):
    """The tiles' outputs in rows' order; with keep, also the tiled rows and each tile's pre-activations."""
    n, count = rows.shape[0], len(experts)
    tile, tiles, position, tile_group = _tiles(groups, n, count)
    width, inner = experts[0][-1].shape[-1], 2 * experts[0][-1].shape[0]

    def branch(w):
        def run(r):
            pre = _projected(r, *w[:-1])
            return _activated(pre, w[-1]), (pre if keep else None)

        return run

    def unused(r):
        return jnp.zeros((tile, width), rows.dtype), (jnp.zeros((tile, inner), rows.dtype) if keep else None)

    branches = [branch(w) for w in experts] + [unused]

    def one(_, t):
        rows_t, group = t
        return None, lax.switch(group, branches, rows_t)

    tiled = _tiled(rows, position, tile, tiles)
    _, (out, pre) = lax.scan(one, None, (tiled, tile_group))
    out = out.reshape(tiles * tile, width)[position]
    return (out, tiled, pre) if keep else out


FEW_ROWS = 4  # NOTE: a decode step of 1-2 tokens at top-2: each row through its own expert directly


def row_by_row_swiglu(rows, groups, experts: list):
    """Each of a few rows through its own expert (lax.switch per row): a lone token reads only its k experts'
    weights, where the tile loop's fixed bound costs more than the products (1.33 ms against 0.4 ms of reads
    at one token of the benchmark's layer)."""
    branches = [lambda r, w=w: _swiglu(r, *w) for w in experts]
    return jnp.concatenate([lax.switch(groups[i], branches, rows[i : i + 1]) for i in range(rows.shape[0])])


@jax.custom_vjp
def grouped_swiglu(rows, groups, experts: list):
    """Each row through its group's expert (rows sorted by group [N]; experts: each one's weights, _swiglu's).

    Each group's rows are padded to whole tiles, and a loop runs one tile at a time through the one expert
    it belongs to (lax.switch over the experts' own weights: nothing is stacked or copied), skipping the
    unused tiles of the static bound: the experts' products cost the chosen rows (plus under a tile a group),
    and an expert no row chose is not read. (lax.ragged_dot computes every group over all rows on XLA:CPU:
    2.1x a dense all-experts layer at 2048 tokens, top-2 of 8.) The backward pass walks the same tiles
    (_grouped_backward) from the pre-activations the forward kept, adding each tile's weight gradients into its
    own expert's alone."""
    return _grouped_forward(rows, groups, experts)


def _grouped_fwd(rows, groups, experts):
    out, tiled, pre = _grouped_forward(rows, groups, experts, keep=True)
    return out, (groups, experts, tiled, pre)  # NOTE: not rows: the tiles hold them


def _grouped_backward(saved, d_out):
    """Per tile, from its kept pre-activations, add its weight gradients into its own expert's slot of stacked
    gradients (a scan's in-place update); autodiff of the forward loop would instead carry and add every
    expert's (mostly zero) gradients at every tile."""
    groups, experts, tiled, pre = saved
    n, count, width = groups.shape[0], len(experts), tiled.shape[2]
    tile, tiles, position, tile_group = _tiles(groups, n, count)
    stacked = [jnp.stack(parts) for parts in zip(*experts)]
    live = tile_group < count
    group = jnp.minimum(tile_group, count - 1)

    def one(grads, t):
        rows_t, pre_t, d_t, g, on = t
        weights = [w[g] for w in stacked]
        d_t = jnp.where(on, d_t, 0)  # NOTE: an unused tile adds nothing
        _, finish = jax.vjp(_activated, pre_t, weights[-1])
        d_pre, d_down = finish(d_t)
        _, project = jax.vjp(_projected, rows_t, *weights[:-1])  # NOTE: its unused forward is dead code
        d_rows, *d_in = project(d_pre)
        grads = [acc.at[g].add(dw) for acc, dw in zip(grads, [*d_in, d_down])]
        return grads, d_rows

    zeros = [jnp.zeros_like(w) for w in stacked]
    d_tiles = _tiled(d_out, position, tile, tiles)
    grads, d_rows = lax.scan(one, zeros, (tiled, pre, d_tiles, group, live))
    d_rows = d_rows.reshape(tiles * tile, width)[position]
    d_experts = [tuple(grad[e] for grad in grads) for e in range(count)]
    return d_rows, None, d_experts


grouped_swiglu.defvjp(_grouped_fwd, _grouped_backward)


def _experts_of(weights, fused_gate_up: bool) -> list:
    """Each expert's weights: (gate|up [H, 2I], down [I, H]) where fused_gate_up, else (gate, up, down)."""
    step = 2 if fused_gate_up else 3
    return [tuple(weights[i : i + step]) for i in range(0, len(weights), step)]


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
    router_loss_grad=0.0,
    aux_loss_coef=0.0,
    z_loss_coef=0.0,
    orthogonal_loss_coef=0.0,
):
    """x [..., H] (T tokens), the router's gate_w [H, E], its correction bias [E] where correction_bias, then each
    expert's weights: (gate|up [H, 2I], down [I, H]) where fused_gate_up, else (gate [H, I], up [H, I], down)
    -> (the routed output [T, H], the router logits [T, E] in float32). Routing attributes: route()'s. A
    router_loss_grad other than 0 (ERNIE 4.5 MoE in training) gives the router loss of the coefficients that
    gradient in the backward pass (moe_loss.py); the output's values are unchanged."""
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
    experts_weights = _experts_of(weights, fused_gate_up)
    rows, groups = x[token], flat[order]
    if rows.shape[0] <= FEW_ROWS:
        out = row_by_row_swiglu(rows, groups, experts_weights)
    else:
        out = grouped_swiglu(rows, groups, experts_weights)
    out = out * chosen_weights.reshape(-1)[order].astype(x.dtype)[:, None]
    routed = jnp.zeros_like(x).at[token].add(out)
    if router_loss_grad:
        loss = router_loss(router_logits, gate_w, scoring, top_k, aux_loss_coef, z_loss_coef, orthogonal_loss_coef)
        routed = with_loss_gradient(routed, loss, float(router_loss_grad))
    return routed, router_logits
