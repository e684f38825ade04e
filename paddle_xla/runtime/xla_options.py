"""XLA compiler options chosen per program: what the measured best setting is for a Graph on the
backend it compiles for. Paddle-free."""

from __future__ import annotations

import os

from ..graph import Graph
from ..ops.util import on_xla_cpu

CONVOLUTIONS = frozenset(
    f"pd_op.{n}"
    for n in (
        "conv2d",
        "depthwise_conv2d",
        "conv3d",
        "conv2d_transpose",
        "depthwise_conv2d_transpose",
        "conv3d_transpose",
        "deformable_conv",
    )
)
YNN_TYPES = "xla_cpu_experimental_ynn_fusion_type"


def inference_options(graph: Graph) -> dict[str, str | bool] | None:
    """Options for compiling `graph`'s forward program, or None for XLA's defaults.

    NOTE: on XLA:CPU, YNNPACK convolutions scale poorly to the few threads of a small machine; with
    XLA's own convolution emitter (GEMMs stay on YNNPACK) ResNet-50 batch 8 ran 635 -> 500 ms on
    2 cores, outputs equal to 1e-6. A user's own XLA_FLAGS setting of the same option wins."""
    return options_for(has_convolutions(graph))


def has_convolutions(graph: Graph) -> bool:
    return any(op.name in CONVOLUTIONS for op in graph.ops())


def options_for(convolutions: bool) -> dict[str, str | bool] | None:
    """inference_options for a program known only by whether it convolves (an artifact's manifest says).

    NOTE: artifacts compiled without them until LOWERING_VERSION 4: ResNet-50 b8 from a .pxa, 2 cores,
    fp32 279.5 -> 237.7 ms, bf16 218 -> 185."""
    if not convolutions or not on_xla_cpu() or YNN_TYPES in os.environ.get("XLA_FLAGS", ""):
        return None
    return {YNN_TYPES: "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
