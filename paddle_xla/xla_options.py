"""XLA compiler options chosen per program: what the measured best setting is for a Graph on the
backend it compiles for. Paddle-free."""
from __future__ import annotations

import os

from .graph import Graph
from .ops.util import on_xla_cpu

CONVOLUTIONS = frozenset(f"pd_op.{n}" for n in (
    "conv2d", "depthwise_conv2d", "conv3d", "conv2d_transpose", "depthwise_conv2d_transpose", "conv3d_transpose",
    "deformable_conv"))
YNN_TYPES = "xla_cpu_experimental_ynn_fusion_type"


def inference_options(graph: Graph) -> dict[str, str] | None:
    """Options for compiling `graph`'s forward program, or None for XLA's defaults.

    NOTE: on XLA:CPU, YNNPACK convolutions scale poorly to the few threads of a small machine; with
    XLA's own convolution emitter (GEMMs stay on YNNPACK) ResNet-50 batch 8 ran 635 -> 500 ms on
    2 cores, outputs equal to 1e-6. A user's own XLA_FLAGS setting of the same option wins."""
    if not on_xla_cpu() or YNN_TYPES in os.environ.get("XLA_FLAGS", ""):
        return None
    if not any(op.name in CONVOLUTIONS for op in graph.ops()):
        return None
    return {YNN_TYPES: "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
