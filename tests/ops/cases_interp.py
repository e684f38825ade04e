import paddle
import paddle.nn.functional as F

from .harness import Arg, OpCase

X = Arg((2, 3, 5, 7))
XH = Arg((2, 5, 7, 3))
NEAR, BIL, BIC = ["pd_op.nearest_interp"], ["pd_op.bilinear_interp"], ["pd_op.bicubic_interp"]
LIN, TRI = ["pd_op.linear_interp"], ["pd_op.trilinear_interp"]
_F16 = dict(rtol=2e-3, atol=2e-3, reason="float16 output rounding")


def _interp(**kw):
    return lambda x: F.interpolate(x, **kw)


CASES = [
    # ---- nearest ----
    OpCase("nearest_scale2", _interp(scale_factor=2, mode="nearest"), [X], NEAR),
    OpCase("nearest_size_down", _interp(size=[3, 4], mode="nearest"), [X], NEAR),
    OpCase("nearest_size_up_odd_nhwc", _interp(size=[8, 11], mode="nearest", data_format="NHWC"), [XH], NEAR),
    # NOTE: F.interpolate refuses align_corners for nearest, but the op takes it (old static API).
    OpCase(
        "nearest_align_corners",
        lambda x: paddle._C_ops.nearest_interp(x, None, None, None, "NCHW", -1, 9, 12, [], "nearest", True, 0),
        [X],
        NEAR,
    ),
    OpCase("nearest_scale_frac", _interp(scale_factor=[1.7, 0.6], mode="nearest"), [X], NEAR),
    OpCase("nearest_f64", _interp(scale_factor=3, mode="nearest"), [Arg((1, 2, 3, 4), "float64")], NEAR),
    OpCase(
        "nearest_f16",
        _interp(size=[7, 9], mode="nearest"),
        [Arg((1, 2, 3, 4), "float16")],
        NEAR,
        grad_rtol=1e-2,
        grad_atol=1e-2,
        reason="Paddle sums the gradient taps in float16",
    ),
    OpCase(
        "nearest_bf16",
        _interp(size=[7, 9], mode="nearest"),
        [Arg((1, 2, 3, 4), "bfloat16")],
        NEAR,
        grad_rtol=2e-2,
        grad_atol=2e-2,
        reason="Paddle sums the gradient taps in bfloat16",
    ),
    OpCase("nearest_3d", _interp(scale_factor=2, mode="nearest", data_format="NCDHW"), [Arg((1, 2, 2, 3, 4))], NEAR),
    OpCase("nearest_int64", _interp(size=[6, 9], mode="nearest"), [Arg((1, 2, 3, 4), "int64")], NEAR),
    # ---- bilinear ----
    OpCase("bilinear_size", _interp(size=[8, 11], mode="bilinear"), [X], BIL),
    OpCase("bilinear_down", _interp(size=[3, 4], mode="bilinear"), [X], BIL),
    OpCase("bilinear_align_corners", _interp(size=[8, 11], mode="bilinear", align_corners=True), [X], BIL),
    OpCase("bilinear_align_mode1", _interp(size=[8, 11], mode="bilinear", align_mode=1), [X], BIL),
    OpCase(
        "bilinear_scale_frac_nhwc", _interp(scale_factor=[1.5, 2.3], mode="bilinear", data_format="NHWC"), [XH], BIL
    ),
    OpCase("bilinear_scale_down", _interp(scale_factor=0.6, mode="bilinear"), [X], BIL),
    OpCase("bilinear_to_one", _interp(size=[1, 3], mode="bilinear"), [X], BIL),
    OpCase("bilinear_same_size", _interp(size=[5, 7], mode="bilinear"), [X], BIL),
    OpCase(
        "bilinear_f64", _interp(size=[8, 11], mode="bilinear", align_corners=True), [Arg((2, 3, 5, 7), "float64")], BIL
    ),
    OpCase("bilinear_f16", _interp(size=[8, 11], mode="bilinear"), [Arg((2, 3, 5, 7), "float16")], BIL, **_F16),
    OpCase(
        "bilinear_size_from_shape",
        lambda x, y: F.interpolate(x, size=paddle.shape(y)[2:], mode="bilinear"),
        [X, Arg((1, 1, 9, 12), grad=False)],
        BIL,
    ),
    OpCase(
        "bilinear_size_tensor_list",
        lambda x, y: F.interpolate(x, size=[paddle.shape(y)[2], 9], mode="bilinear"),
        [X, Arg((1, 1, 9, 12), grad=False)],
        BIL,
    ),
    OpCase(
        "bilinear_scale_tensor",
        lambda x: F.interpolate(x, scale_factor=paddle.to_tensor([1.5, 2.0]), mode="bilinear"),
        [X],
        BIL,
    ),
    # ---- bicubic ----
    OpCase("bicubic_size", _interp(size=[8, 11], mode="bicubic"), [X], BIC),
    OpCase(
        "bicubic_align_corners_nhwc",
        _interp(size=[9, 4], mode="bicubic", align_corners=True, data_format="NHWC"),
        [XH],
        BIC,
    ),
    OpCase("bicubic_scale", _interp(scale_factor=[1.5, 0.7], mode="bicubic"), [X], BIC),
    OpCase("bicubic_f64", _interp(size=[8, 11], mode="bicubic"), [Arg((2, 3, 5, 7), "float64")], BIC),
    # ---- linear / trilinear ----
    OpCase("linear", _interp(size=[11], mode="linear"), [Arg((2, 3, 6))], LIN),
    OpCase(
        "linear_align_mode1_nwc",
        _interp(scale_factor=1.5, mode="linear", align_mode=1, data_format="NWC"),
        [Arg((2, 6, 3))],
        LIN,
    ),
    OpCase(
        "linear_align_corners_f64",
        _interp(size=[4], mode="linear", align_corners=True),
        [Arg((2, 3, 6), "float64")],
        LIN,
    ),
    # a single output: Paddle's linear/trilinear keep the in/out step there (bilinear's is 0: bilinear_to_one)
    OpCase("linear_to_one", _interp(size=[1], mode="linear", align_mode=0), [Arg((2, 3, 5))], LIN),
    OpCase("linear_to_one_scale", _interp(scale_factor=0.3, mode="linear"), [Arg((2, 3, 5))], LIN),
    OpCase("linear_to_one_align_corners", _interp(size=[1], mode="linear", align_corners=True), [Arg((2, 3, 5))], LIN),
    OpCase("trilinear_to_one", _interp(size=[1, 1, 2], mode="trilinear"), [Arg((1, 2, 3, 4, 5))], TRI),
    OpCase("trilinear", _interp(size=[4, 6, 5], mode="trilinear"), [Arg((2, 3, 3, 4, 5))], TRI),
    OpCase(
        "trilinear_scale_ndhwc",
        _interp(scale_factor=[1.5, 2, 0.7], mode="trilinear", data_format="NDHWC"),
        [Arg((2, 3, 4, 5, 3))],
        TRI,
    ),
    OpCase(
        "trilinear_align_corners_f64",
        _interp(size=[4, 6, 5], mode="trilinear", align_corners=True),
        [Arg((1, 2, 3, 4, 5), "float64")],
        TRI,
    ),
    # ---- affine_grid / grid_sample ----
    OpCase("affine_grid", lambda t: F.affine_grid(t, [2, 3, 4, 5]), [Arg((2, 2, 3))], ["pd_op.affine_grid"]),
    OpCase(
        "affine_grid_no_align",
        lambda t: F.affine_grid(t, [2, 3, 4, 5], align_corners=False),
        [Arg((2, 2, 3))],
        ["pd_op.affine_grid"],
    ),
    OpCase(
        "affine_grid_3d_f64",
        lambda t: F.affine_grid(t, [2, 3, 3, 4, 5], align_corners=False),
        [Arg((2, 3, 4), "float64")],
        ["pd_op.affine_grid"],
    ),
    OpCase(
        "grid_sample",
        lambda x, g: F.grid_sample(x, g),
        [X, Arg((2, 6, 4, 2), low=-1.2, high=1.2)],
        ["pd_op.grid_sample"],
    ),
    OpCase(
        "grid_sample_no_align",
        lambda x, g: F.grid_sample(x, g, align_corners=False),
        [X, Arg((2, 6, 4, 2), low=-1.2, high=1.2)],
        ["pd_op.grid_sample"],
    ),
    OpCase(
        "grid_sample_border",
        lambda x, g: F.grid_sample(x, g, padding_mode="border", align_corners=False),
        [X, Arg((2, 6, 4, 2), low=-1.3, high=1.3)],
        ["pd_op.grid_sample"],
    ),
    OpCase(
        "grid_sample_reflection",
        lambda x, g: F.grid_sample(x, g, padding_mode="reflection"),
        [X, Arg((2, 6, 4, 2), low=-2.5, high=2.5)],
        ["pd_op.grid_sample"],
    ),
    OpCase(
        "grid_sample_reflection_no_align",
        lambda x, g: F.grid_sample(x, g, padding_mode="reflection", align_corners=False),
        [X, Arg((2, 6, 4, 2), low=-2.5, high=2.5)],
        ["pd_op.grid_sample"],
    ),
    OpCase(
        "grid_sample_nearest",
        lambda x, g: F.grid_sample(x, g, mode="nearest"),
        [X, Arg((2, 6, 4, 2), low=-1.2, high=1.2)],
        ["pd_op.grid_sample"],
    ),
    OpCase(
        "grid_sample_f64",
        lambda x, g: F.grid_sample(x, g, align_corners=False),
        [Arg((2, 3, 5, 7), "float64"), Arg((2, 6, 4, 2), "float64", -1.2, 1.2)],
        ["pd_op.grid_sample"],
    ),
    OpCase(
        "grid_sample_3d",
        lambda x, g: F.grid_sample(x, g, align_corners=False),
        [Arg((2, 3, 4, 5, 6)), Arg((2, 3, 4, 2, 3), low=-1.2, high=1.2)],
        ["pd_op.grid_sample"],
    ),
]
