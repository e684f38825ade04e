import paddle.nn.functional as F
from paddle.vision.ops import deform_conv2d

from .harness import Arg, OpCase

X = Arg((2, 4, 9, 8))
XH = Arg((2, 9, 8, 4))
W = Arg((6, 4, 3, 3))
C2, DW, C3 = ["pd_op.conv2d"], ["pd_op.depthwise_conv2d"], ["pd_op.conv3d"]
T2, DT2, T3 = ["pd_op.conv2d_transpose"], ["pd_op.depthwise_conv2d_transpose"], ["pd_op.conv3d_transpose"]
_CONV_TOL = dict(rtol=1e-5, atol=1e-5, reason="float32 sums of 36+ products in a different order")

CASES = [
    OpCase("conv2d_basic", lambda x, w: F.conv2d(x, w), [X, W], C2, **_CONV_TOL),
    OpCase("conv2d_stride_pad", lambda x, w: F.conv2d(x, w, stride=2, padding=1), [X, W], C2, **_CONV_TOL),
    OpCase(
        "conv2d_pad4_dil",
        lambda x, w: F.conv2d(x, w, stride=(1, 2), padding=[1, 2, 0, 3], dilation=(2, 1)),
        [X, W],
        C2,
        **_CONV_TOL,
    ),
    OpCase(
        "conv2d_pad_pairs_nhwc",
        lambda x, w: F.conv2d(x, w, padding=[[0, 0], [2, 1], [0, 1], [0, 0]], data_format="NHWC"),
        [XH, W],
        C2,
        **_CONV_TOL,
    ),
    OpCase(
        "conv2d_same_stride_dil",
        lambda x, w: F.conv2d(x, w, stride=2, padding="SAME", dilation=2),
        [X, W],
        C2,
        **_CONV_TOL,
    ),
    OpCase(
        "conv2d_same_nhwc",
        lambda x, w: F.conv2d(x, w, stride=(2, 3), padding="same", data_format="NHWC"),
        [XH, W],
        C2,
        **_CONV_TOL,
    ),
    OpCase("conv2d_valid", lambda x, w: F.conv2d(x, w, stride=2, padding="VALID"), [X, W], C2, **_CONV_TOL),
    # NOTE: on XLA:CPU a conv of <= 36 products per output into <= 32 channels (these, and the cases above
    # with X and W) runs as shifted multiply-adds (ops/depthwise.py); a wider one keeps the emitter.
    OpCase(
        "conv2d_rgb_stem",
        lambda x, w: F.conv2d(x, w, stride=2, padding=1),
        [Arg((2, 3, 16, 16)), Arg((16, 3, 3, 3))],
        C2,
        **_CONV_TOL,
    ),
    OpCase(
        "conv2d_rgb_stem_nhwc_same",
        lambda x, w: F.conv2d(x, w, stride=2, padding="SAME", data_format="NHWC"),
        [Arg((2, 15, 16, 3)), Arg((8, 3, 3, 3))],
        C2,
        **_CONV_TOL,
    ),
    OpCase(
        "conv2d_wide_stride_pad",
        lambda x, w: F.conv2d(x, w, stride=2, padding=1),
        [Arg((2, 8, 9, 8)), Arg((6, 8, 3, 3))],
        C2,
        **_CONV_TOL,
    ),
    OpCase("conv2d_groups2", lambda x, w: F.conv2d(x, w, groups=2, padding=1), [X, Arg((6, 2, 3, 3))], C2, **_CONV_TOL),
    OpCase(
        "conv2d_f64",
        lambda x, w: F.conv2d(x, w, stride=2, padding=1),
        [Arg((2, 4, 9, 8), "float64"), Arg((6, 4, 3, 3), "float64")],
        C2,
    ),
    OpCase(
        "depthwise_conv2d", lambda x, w: F.conv2d(x, w, groups=4, padding=1), [X, Arg((4, 1, 3, 3))], DW, **_CONV_TOL
    ),
    OpCase(
        "depthwise_conv2d_mult_nhwc",
        lambda x, w: F.conv2d(x, w, groups=4, stride=2, data_format="NHWC"),
        [XH, Arg((8, 1, 3, 3))],
        DW,
        **_CONV_TOL,
    ),
    # NOTE: on XLA:CPU these run as shifted multiply-adds (ops/depthwise.py), elsewhere as grouped convs.
    OpCase(
        "depthwise_5x5_same_stride2",
        lambda x, w: F.conv2d(x, w, groups=4, stride=2, padding="SAME"),
        [X, Arg((4, 1, 5, 5))],
        DW,
        **_CONV_TOL,
    ),
    OpCase(
        "depthwise_pad4_dil",
        lambda x, w: F.conv2d(x, w, groups=4, padding=[1, 2, 0, 3], dilation=(2, 1)),
        [X, Arg((4, 1, 3, 3))],
        DW,
        **_CONV_TOL,
    ),
    OpCase(
        "depthwise_valid_nhwc_stride_hw",
        lambda x, w: F.conv2d(x, w, groups=4, stride=(2, 3), padding="VALID", data_format="NHWC"),
        [XH, Arg((4, 1, 3, 2))],
        DW,
        **_CONV_TOL,
    ),
    OpCase(
        "depthwise_f64",
        lambda x, w: F.conv2d(x, w, groups=4, padding=2),
        [Arg((2, 4, 9, 8), "float64"), Arg((12, 1, 5, 5), "float64")],
        DW,
    ),
    OpCase(
        "conv1d",
        lambda x, w: F.conv1d(x, w, stride=2, padding=1),
        [Arg((2, 4, 9)), Arg((6, 4, 3))],
        ["pd_op.conv2d", "pd_op.unsqueeze", "pd_op.squeeze"],
        **_CONV_TOL,
    ),
    OpCase(
        "conv3d",
        lambda x, w: F.conv3d(x, w, stride=(1, 2, 1), padding=1),
        [Arg((2, 4, 5, 6, 5)), Arg((3, 4, 3, 3, 3))],
        C3,
        **_CONV_TOL,
    ),
    OpCase(
        "conv3d_same_ndhwc_groups",
        lambda x, w: F.conv3d(x, w, padding="SAME", groups=2, data_format="NDHWC"),
        [Arg((2, 5, 4, 5, 4)), Arg((4, 2, 2, 3, 3))],
        C3,
        **_CONV_TOL,
    ),
    OpCase(
        "conv3d_f64",
        lambda x, w: F.conv3d(x, w, dilation=2),
        [Arg((1, 2, 6, 6, 6), "float64"), Arg((3, 2, 2, 2, 2), "float64")],
        C3,
    ),
    # ---- transposed ----
    OpCase("conv2d_transpose_basic", lambda x, w: F.conv2d_transpose(x, w), [X, Arg((4, 6, 3, 3))], T2, **_CONV_TOL),
    OpCase(
        "conv2d_transpose_stride_pad",
        lambda x, w: F.conv2d_transpose(x, w, stride=2, padding=1, dilation=2),
        [X, Arg((4, 6, 3, 3))],
        T2,
        **_CONV_TOL,
    ),
    OpCase(
        "conv2d_transpose_output_padding",
        lambda x, w: F.conv2d_transpose(x, w, stride=(2, 3), padding=[1, 0, 2, 1], output_padding=(1, 2)),
        [X, Arg((4, 6, 3, 3))],
        T2,
        **_CONV_TOL,
    ),
    OpCase(
        "conv2d_transpose_output_size",
        lambda x, w: F.conv2d_transpose(x, w, stride=2, output_size=[20, 18]),
        [X, Arg((4, 6, 3, 3))],
        T2,
        **_CONV_TOL,
    ),
    OpCase(
        "conv2d_transpose_same_nhwc",
        lambda x, w: F.conv2d_transpose(x, w, stride=2, padding="SAME", data_format="NHWC"),
        [XH, Arg((4, 6, 3, 3))],
        T2,
        **_CONV_TOL,
    ),
    OpCase(
        "conv2d_transpose_valid_groups",
        lambda x, w: F.conv2d_transpose(x, w, stride=2, padding="VALID", groups=2),
        [X, Arg((4, 3, 3, 2))],
        T2,
        **_CONV_TOL,
    ),
    OpCase(
        "conv2d_transpose_f64",
        lambda x, w: F.conv2d_transpose(x, w, stride=2, padding=1),
        [Arg((2, 4, 5, 5), "float64"), Arg((4, 3, 3, 3), "float64")],
        T2,
    ),
    OpCase(
        "depthwise_conv2d_transpose",
        lambda x, w: F.conv2d_transpose(x, w, groups=4, stride=2, output_padding=1),
        [X, Arg((4, 1, 3, 3))],
        DT2,
        **_CONV_TOL,
    ),
    OpCase(
        "conv1d_transpose",
        lambda x, w: F.conv1d_transpose(x, w, stride=2, padding=1),
        [Arg((2, 4, 7)), Arg((4, 3, 3))],
        ["pd_op.conv2d_transpose", "pd_op.unsqueeze"],
        **_CONV_TOL,
    ),
    OpCase(
        "conv3d_transpose",
        lambda x, w: F.conv3d_transpose(x, w, stride=2, padding=1, output_padding=1),
        [Arg((2, 4, 3, 4, 3)), Arg((4, 3, 3, 3, 3))],
        T3,
        **_CONV_TOL,
    ),
    OpCase(
        "conv3d_transpose_size_ndhwc",
        lambda x, w: F.conv3d_transpose(x, w, stride=(2, 1, 2), output_size=[8, 6, 7], groups=2, data_format="NDHWC"),
        [Arg((2, 3, 4, 3, 4)), Arg((4, 2, 3, 3, 3))],
        T3,
        **_CONV_TOL,
    ),
    # ---- deformable ----
    OpCase(
        "deformable_conv_v1",
        lambda x, o, w: deform_conv2d(x, o, w),
        [Arg((2, 3, 6, 6)), Arg((2, 18, 4, 4)), Arg((4, 3, 3, 3))],
        ["pd_op.deformable_conv"],
        **_CONV_TOL,
    ),
    OpCase(
        "deformable_conv_v2_pad_stride",
        lambda x, o, w, m: deform_conv2d(x, o, w, stride=2, padding=1, mask=m),
        [Arg((2, 3, 7, 7)), Arg((2, 18, 4, 4)), Arg((4, 3, 3, 3)), Arg((2, 9, 4, 4), low=0, high=1)],
        ["pd_op.deformable_conv"],
        **_CONV_TOL,
    ),
    OpCase(
        "deformable_conv_groups_dil_f64",
        lambda x, o, w: deform_conv2d(x, o, w, dilation=2, padding=2, deformable_groups=2, groups=2),
        [Arg((1, 4, 6, 6), "float64"), Arg((1, 36, 6, 6), "float64"), Arg((4, 2, 3, 3), "float64")],
        ["pd_op.deformable_conv"],
    ),
]

# Attributes no other case sets to a non-default value (test_attribute_coverage.py).
CASES += [
    OpCase(
        "conv3d_transpose_same",
        lambda x, w: F.conv3d_transpose(x, w, stride=2, padding="SAME"),
        [Arg((2, 3, 4, 5, 3)), Arg((3, 2, 3, 3, 3))],
        T3,
        rtol=1e-5,
        atol=1e-5,
        reason="float32 sums of 81 products",
    ),
]
