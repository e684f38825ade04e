"""Weights held on the device in the layout the backend's kernels read, for inference programs.

Paddle stores conv filters as [out, in/groups, kh, kw] (OIHW). XLA:CPU's convolutions read HWIO, so
a program fed OIHW filters transposes every filter on every call (ResNet-50: ~25 M floats per call).
An inference program's weights do not change, so the filters are transposed once, when the model is
compiled, and the convolutions are told so. Paddle-free."""
from __future__ import annotations

from jax import lax

from .graph import Graph
from .lower import Interpreter
from .ops import conv as conv_ops

FILTER_OPS = frozenset({"pd_op.conv2d", "pd_op.depthwise_conv2d"})
OIHW_TO_HWIO = (2, 3, 1, 0)


def hwio_filter_names(graph: Graph) -> set[str]:
    """Float 4-D parameters read only as the filter (operand 1) of a 2-D convolution."""
    floats = {p.name for p in graph.params
              if len(p.shape) == 4 and p.dtype in ("float32", "float16", "bfloat16", "float64")}
    return floats & graph.params_read_only_by(lambda op, i: op in FILTER_OPS and i == 1)


def with_hwio_filters(base: type[Interpreter], filter_values: frozenset[int]) -> type[Interpreter]:
    """`base` with the convolutions whose filter is one of `filter_values` reading it as HWIO."""

    def apply(self, op, args, env):
        if op.name in FILTER_OPS and op.inputs[1] in filter_values:
            return (_conv_hwio(*args, **op.attrs),)
        return base.apply(self, op, args, env)

    return type(f"{base.__name__}_HWIO", (base,), {"apply": apply})


def _conv_hwio(x, w, *, strides, paddings, padding_algorithm="EXPLICIT", dilations=(), groups=1,
               data_format="NCHW", **_ignored):
    """conv_ops.conv with an HWIO filter (same padding rules, same data formats)."""
    pads, dil = conv_ops.resolve_padding(paddings, dilations, padding_algorithm,
                                         conv_ops.spatial_shape(x, data_format), strides, w.shape[:2])
    io = conv_ops.dimension_numbers(2, data_format)[0]
    return lax.conv_general_dilated(x, w.astype(x.dtype), window_strides=tuple(strides), padding=pads,
                                    rhs_dilation=tuple(dil), dimension_numbers=(io, "HWIO", io),
                                    feature_group_count=groups or 1)
