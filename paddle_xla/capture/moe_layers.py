"""PaddleFormers' sparse MoE blocks captured as one `paddle_xla.sparse_moe` op each (ops/moe.py lowers it).

Qwen2-MoE's and Qwen3-MoE's blocks (PaddleFormers 1.2) compute: router logits = h @ gate (float32), a
softmax, the top-k experts per token, their weights divided by their sum where `norm_topk_prob`, and each
chosen expert's SwiGLU MLP (one fused gate|up projection, then down) times its weight, added per token. The
op carries that routed part; Qwen2-MoE's shared expert and its sigmoid gate stay ordinary Paddle code,
captured op by op after the op, as its forward writes them.
"""

from __future__ import annotations

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
    if getattr(mlp, "has_bias", False) or getattr(mlp, "fuse_swiglu", False) or not mlp.fuse_up_gate:
        raise CaptureError(
            f"{type(mlp).__name__}: paddle_xla's sparse MoE op takes experts with one fused gate|up projection, "
            "no bias and no fused swiglu (PaddleFormers' Qwen MoE defaults)"
        )
    return [getattr(mlp, mlp.gate_up_proj_name).weight, mlp.down_proj.weight]


def _weights(layer) -> list:
    return [layer.gate.weight, *(w for mlp in _experts(layer) for w in _expert_weights(mlp))]


def _attrs(layer) -> dict:
    act = _experts(layer)[0].act_type
    if act != "silu":
        raise CaptureError(f"{type(layer).__name__}: paddle_xla's sparse MoE op takes silu experts, not {act!r}")
    return {
        "num_experts": int(layer.num_experts),
        "top_k": int(layer.top_k),
        "norm_topk_prob": bool(layer.norm_topk_prob),
    }


def _outputs(layer, hidden_states) -> list:
    """Stand-ins of the routed output [T, H] and the router logits [T, E] (shapes and dtypes only)."""
    if getattr(layer, "sequence_parallel", False):
        raise CaptureError(f"{type(layer).__name__} with sequence_parallel=True is not captured as one op")
    flat = paddle.reshape(hidden_states, [-1, hidden_states.shape[-1]])
    gate = layer.gate.weight
    return [paddle.scale(flat, 1.0), paddle.matmul(flat.astype(gate.dtype), gate)]


def _qwen3_after(layer, hidden_states, outputs):
    routed, router_logits = outputs
    return paddle.reshape(routed, hidden_states.shape), router_logits


def _qwen2_after(layer, hidden_states, outputs):
    routed, router_logits = outputs
    flat = paddle.reshape(hidden_states, [-1, hidden_states.shape[-1]])
    shared = layer.shared_expert(flat)
    shared = paddle.nn.functional.sigmoid(layer.shared_expert_gate(flat)) * shared
    return paddle.reshape(routed + shared, hidden_states.shape), router_logits


register("Qwen3MoeSparseMoeBlock")(LayerCapture(SPARSE_MOE, _weights, _attrs, _outputs, _qwen3_after))
register("Qwen2MoeSparseMoeBlock")(LayerCapture(SPARSE_MOE, _weights, _attrs, _outputs, _qwen2_after))
