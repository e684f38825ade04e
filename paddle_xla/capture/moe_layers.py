"""PaddleFormers' MoE blocks captured as one `paddle_xla.sparse_moe` op each (ops/moe.py lowers it).

Each block computes router logits = h @ gate (float32), scores, each token's top-k experts, their weights,
and each chosen expert's SwiGLU MLP times its weight, added per token; the families differ in the routing
(ops/moe.py's route(): Qwen's softmax and norm_topk_prob; DeepSeek-V3's sigmoid, correction bias, group
limit and scaling; ERNIE 4.5's softmax, correction bias and clipped renormalisation). The op carries that
routed part; shared experts (Qwen2-MoE's, gated by a sigmoid, DeepSeek-V3's and ERNIE 4.5's) stay ordinary
Paddle code, captured op by op after the op, as the forward writes them. ERNIE 4.5's block, whose own forward
calls GPU-only kernels and sizes buffers on the host, is never run by paddle_xla: capture replaces it, and a
generator's eager probes run the op's lowering in its place (layer_ops.eager_layer_ops).
"""

from __future__ import annotations

import numpy as np
import paddle

from ..errors import CaptureError
from .layer_ops import LayerCapture, register

SPARSE_MOE = "paddle_xla.sparse_moe"


def _experts(layer) -> list:
    if getattr(layer, "fd_fallback", False):
        raise CaptureError(
            f"{type(layer).__name__} with fd_fallback=True runs FastDeploy's fused experts, which paddle_xla does "
            "not capture; build the model with the config's fd_fallback=False (the default)"
        )
    return list(layer.experts)


def _expert_weights(mlp) -> list:
    """An expert's weights, (gate|up, down) or (gate, up, down): SwiGLU experts without bias only."""
    if getattr(mlp, "has_bias", False) or getattr(mlp, "fuse_swiglu", False) or mlp.act_type != "silu":
        raise CaptureError(
            f"{type(mlp).__name__}: paddle_xla's sparse MoE op takes silu (SwiGLU) experts without bias or fused "
            "swiglu (the defaults of PaddleFormers' MoE models)"
        )
    if mlp.fuse_up_gate:
        return [getattr(mlp, mlp.gate_up_proj_name).weight, mlp.down_proj.weight]
    return [mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight]


def _routing(num_experts, top_k, norm_topk_prob, fused_gate_up, correction_bias, **given) -> dict:
    """The op's attributes: the routing of ops/moe.py's route(), its defaults those of Qwen MoE."""
    attrs = dict(scoring="softmax", norm_add=0.0, norm_min=0.0, routed_scaling=1.0, n_group=1, topk_group=1)
    attrs.update(given)
    attrs.update(
        num_experts=int(num_experts),
        top_k=int(top_k),
        norm_topk_prob=bool(norm_topk_prob),
        fused_gate_up=bool(fused_gate_up),
        correction_bias=bool(correction_bias),
    )
    return attrs


def _outputs(layer, hidden_states) -> list:
    """Stand-ins of the routed output [T, H] and the router logits [T, E] (shapes and dtypes only)."""
    if getattr(layer, "sequence_parallel", False):
        raise CaptureError(f"{type(layer).__name__} with sequence_parallel=True is not captured as one op")
    flat = paddle.reshape(hidden_states, [-1, hidden_states.shape[-1]])
    gate = layer.gate.weight
    return [paddle.scale(flat, 1.0), paddle.matmul(flat.astype("float32"), gate.astype("float32"))]


# ---- Qwen2-MoE and Qwen3-MoE: softmax, top-k, norm_topk_prob; fused gate|up experts ----------------------
def _qwen_weights(layer) -> list:
    return [layer.gate.weight, *(w for mlp in _experts(layer) for w in _expert_weights(mlp))]


def _qwen_attrs(layer) -> dict:
    fused = _experts(layer)[0].fuse_up_gate
    return _routing(layer.num_experts, layer.top_k, layer.norm_topk_prob, fused, correction_bias=False)


def _qwen3_after(layer, hidden_states, outputs):
    routed, router_logits = outputs
    return paddle.reshape(routed, hidden_states.shape), router_logits


def _qwen2_after(layer, hidden_states, outputs):
    routed, router_logits = outputs
    flat = paddle.reshape(hidden_states, [-1, hidden_states.shape[-1]])
    shared = layer.shared_expert(flat)
    shared = paddle.nn.functional.sigmoid(layer.shared_expert_gate(flat)) * shared
    return paddle.reshape(routed + shared, hidden_states.shape), router_logits


register("Qwen3MoeSparseMoeBlock")(LayerCapture(SPARSE_MOE, _qwen_weights, _qwen_attrs, _outputs, _qwen3_after))
register("Qwen2MoeSparseMoeBlock")(LayerCapture(SPARSE_MOE, _qwen_weights, _qwen_attrs, _outputs, _qwen2_after))


# ---- DeepSeek-V3: sigmoid scores, correction bias, group-limited top-k, scaled weights; shared experts --------
def _deepseek_weights(layer) -> list:
    gate = layer.gate
    return [gate.weight, gate.e_score_correction_bias, *(w for mlp in _experts(layer) for w in _expert_weights(mlp))]


def _deepseek_attrs(layer) -> dict:
    gate = layer.gate
    return _routing(
        gate.n_routed_experts,
        gate.top_k,
        gate.norm_topk_prob,
        _experts(layer)[0].fuse_up_gate,
        correction_bias=True,
        scoring="sigmoid",
        norm_add=1e-20,  # NOTE: DeepseekV3TopkRouter's denominator: sum + 1e-20
        routed_scaling=float(gate.routed_scaling_factor),
        n_group=int(gate.n_group or 1),
        topk_group=int(gate.topk_group or 1),
    )


def _deepseek_after(layer, hidden_states, outputs):
    routed = paddle.reshape(outputs[0], hidden_states.shape)
    return routed + layer.shared_experts(hidden_states)


register("DeepseekV3MoE")(LayerCapture(SPARSE_MOE, _deepseek_weights, _deepseek_attrs, _outputs, _deepseek_after))


# ---- ERNIE 4.5 MoE: softmax, correction bias, weights / max(sum, 1e-12); fused gate|up; shared experts --------
def _ernie_correction(layer) -> bool:
    return bool(getattr(layer, "use_correction_bias", getattr(layer.gate, "use_correction_bias", False)))


def _ernie_weights(layer) -> list:
    bias = [layer.moe_statics.e_score_correction_bias] if _ernie_correction(layer) else []
    return [layer.gate.weight, *bias, *(w for mlp in _experts(layer) for w in _expert_weights(mlp))]


def _ernie_attrs(layer) -> dict:
    scoring = layer.config.scoring_func
    experts = _experts(layer)
    if any(e is None for e in experts):
        raise CaptureError(
            f"{type(layer).__name__} holds only its own rank's experts (moe_group of {len(experts)} experts over "
            "several ranks); capture it on one rank, and spread the experts with px.Strategy instead"
        )
    if layer.group_experts:
        raise CaptureError(
            f"{type(layer).__name__}: moe_group_experts=True (a top-1 choice within each of k expert groups) is "
            "not captured; paddle_xla's MoE op takes the default moe_group_experts=False"
        )
    _refuse_dropping(layer)
    return _routing(
        layer.num_experts,
        layer.top_k,
        layer.gate.norm_gate_logits,
        experts[0].fuse_up_gate,
        correction_bias=_ernie_correction(layer),
        scoring=scoring,
        norm_min=1e-12,  # NOTE: MOEAllGatherLayerV2 divides by clip(sum, min=1e-12), not by moe_norm_min
        **(_ernie_router_loss(layer) if layer.training else {}),
    )


def _ernie_router_loss(layer) -> dict:
    """The router loss's coefficients and the gradient FakeMoERouterLoss gives it (ops/moe_loss.py): a decoder
    layer passes the block's router loss to FakeMoERouterLoss, whose backward alone reads it; the op gives it
    that gradient itself, so the block's stand-in returns no router loss."""
    config = layer.gate.config

    def coef(name: str) -> float:  # NOTE: a list holds one per modality; text's is the first
        return float(np.asarray(getattr(config, name), np.float32).reshape(-1)[0]) if getattr(config, name) else 0.0

    return dict(
        router_loss_grad=1.0 if config.enable_delay_scale_loss else 1.0 / config.num_acc_steps,
        aux_loss_coef=coef("router_aux_loss_coef"),
        z_loss_coef=coef("router_z_loss_coef"),
        orthogonal_loss_coef=coef("moe_orthogonal_loss_lambda"),
    )


def _refuse_dropping(layer) -> None:
    """ERNIE's gate gives an expert int(cap * S // E) slots for S tokens and drops the tokens past them; a token
    picks an expert once, so a factor cap >= E never drops, and a smaller one may: paddle_xla's op is dropless."""
    caps = [float(c) for c in layer.gate.cap]
    if min(caps) < layer.num_experts:
        raise CaptureError(
            f"{type(layer).__name__}: moe_capacity {caps} lets an expert drop tokens past int(cap * tokens / "
            f"{layer.num_experts}) slots, and paddle_xla's MoE op is dropless (it never drops); give moe_capacity "
            f"factors of at least the expert count ({layer.num_experts}), as the default [64, 64, 64] is"
        )


def _ernie_after(layer, hidden_states, outputs):
    """The block's (output, combine weights, router loss, gate logits): the combine weights, which the decoder
    layer drops, and the router loss, which only FakeMoERouterLoss's backward reads (the op gives it its
    gradient: _ernie_router_loss), are None."""
    routed, gate_logits = outputs
    if layer.shared_experts is not None:
        routed = routed + layer.shared_experts(paddle.reshape(hidden_states, [-1, hidden_states.shape[-1]]))
    return paddle.reshape(routed, hidden_states.shape), None, None, gate_logits


register("Ernie4_5_MoeSparseMoeBlock")(
    LayerCapture(
        SPARSE_MOE,
        _ernie_weights,
        _ernie_attrs,
        _outputs,
        _ernie_after,
    )
)
