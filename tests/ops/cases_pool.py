import paddle
import paddle.nn.functional as F

from .harness import Arg, OpCase

X = Arg((2, 3, 9, 8))
XH = Arg((2, 9, 8, 3))
X3 = Arg((2, 3, 5, 6, 7))
P2, P3 = ["pd_op.pool2d"], ["pd_op.pool3d"]
IDX2, IDX3 = ["pd_op.max_pool2d_with_index"], ["pd_op.max_pool3d_with_index"]
_FP16 = dict(rtol=1e-3, atol=1e-3, reason="float16 rounding of the window sums")

CASES = [
    OpCase("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1), [X], P2),
    OpCase("max_pool2d_ceil_nhwc", lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, data_format="NHWC"), [XH], P2),
    OpCase("max_pool2d_pad4", lambda x: F.max_pool2d(x, (3, 2), (2, 1), padding=[1, 2, 0, 1]), [X], P2),
    OpCase("max_pool2d_same", lambda x: F.max_pool2d(x, 3, 2, padding="SAME"), [X], P2),
    OpCase("max_pool2d_valid_f64", lambda x: F.max_pool2d(x, 2, padding="VALID"), [Arg((2, 3, 7, 6), "float64")], P2),
    OpCase("max_pool2d_f16", lambda x: F.max_pool2d(x, 2, 2), [Arg((2, 3, 6, 6), "float16")], P2),
    OpCase("avg_pool2d_exclusive", lambda x: F.avg_pool2d(x, 3, 2, 1), [X], P2),
    OpCase("avg_pool2d_inclusive", lambda x: F.avg_pool2d(x, 3, 2, 1, exclusive=False), [X], P2),
    OpCase("avg_pool2d_inclusive_ceil", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, exclusive=False), [X], P2),
    OpCase(
        "avg_pool2d_exclusive_ceil_pad4_nhwc",
        lambda x: F.avg_pool2d(
            x, (3, 2), 2, padding=[[0, 0], [1, 0], [0, 1], [0, 0]], ceil_mode=True, data_format="NHWC"
        ),
        [XH],
        P2,
    ),
    OpCase("avg_pool2d_same_f64", lambda x: F.avg_pool2d(x, 3, 2, padding="SAME"), [Arg((2, 3, 7, 6), "float64")], P2),
    OpCase("avg_pool2d_f16", lambda x: F.avg_pool2d(x, 3, 2, 1), [Arg((2, 3, 6, 6), "float16")], P2, **_FP16),
    # window sums past float16's 65504: Paddle accumulates half in float32
    OpCase(
        "avg_pool2d_f16_large",
        lambda x: F.avg_pool2d(x, 2, 2, exclusive=False),
        [Arg((1, 2, 4, 4), "float16", low=-6e4, high=-5e4)],
        P2,
        **_FP16,
    ),
    OpCase(
        "adaptive_avg_pool2d_f16_large",
        lambda x: F.adaptive_avg_pool2d(x, [2, 1]),
        [Arg((1, 2, 4, 4), "float16", low=5e4, high=6e4)],
        P2,
        **_FP16,
    ),
    OpCase("adaptive_avg_pool2d_uneven", lambda x: F.adaptive_avg_pool2d(x, [4, 5]), [Arg((2, 3, 7, 11))], P2),
    OpCase("adaptive_avg_pool2d_global_nhwc", lambda x: F.adaptive_avg_pool2d(x, 1, data_format="NHWC"), [XH], P2),
    OpCase("adaptive_avg_pool2d_nhwc", lambda x: F.adaptive_avg_pool2d(x, [4, 3], data_format="NHWC"), [XH], P2),
    OpCase("adaptive_avg_pool2d_upsample", lambda x: F.adaptive_avg_pool2d(x, [5, 6]), [Arg((1, 2, 3, 4))], P2),
    OpCase(
        "global_pool2d_attr",
        lambda x: paddle._C_ops.pool2d(x, [3, 3], [1, 1], [0, 0], False, True, "NCHW", "max", True, False, "EXPLICIT"),
        [X],
        P2,
    ),
    OpCase("max_pool3d", lambda x: F.max_pool3d(x, 3, 2, 1), [X3], P3),
    OpCase(
        "max_pool3d_ceil_ndhwc",
        lambda x: F.max_pool3d(x, 2, ceil_mode=True, data_format="NDHWC"),
        [Arg((2, 5, 6, 7, 3))],
        P3,
    ),
    OpCase("avg_pool3d_inclusive", lambda x: F.avg_pool3d(x, 3, 2, 1, exclusive=False), [X3], P3),
    OpCase("avg_pool3d_f64", lambda x: F.avg_pool3d(x, 2, 2, padding="SAME"), [Arg((1, 2, 5, 4, 3), "float64")], P3),
    OpCase("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, [2, 4, 3]), [X3], P3),
    OpCase("avg_pool1d", lambda x: F.avg_pool1d(x, 3, 2, 1), [Arg((2, 3, 9))], P2 + ["pd_op.unsqueeze"]),
    # ---- edges: C++'s truncating division in the output size, windows that are all padding ----
    OpCase(
        "avg_pool1d_valid_short",
        lambda x: F.avg_pool1d(x, 2, 2, padding="VALID"),
        [Arg((2, 3, 1))],
        P2 + ["pd_op.unsqueeze"],
    ),
    OpCase("max_pool1d_valid_short", lambda x: F.max_pool1d(x, 4, 2, padding="VALID"), [Arg((2, 3, 3))], P2),
    OpCase(
        "max_pool2d_ceil_empty_window",
        lambda x: F.max_pool2d(x, [1, 2], [1, 3], padding=[0, 1], ceil_mode=True),
        [Arg((2, 3, 4, 4))],
        P2,
    ),
    OpCase("max_pool2d_pad_only_window", lambda x: F.max_pool2d(x, 1, 3, padding=1), [Arg((2, 3, 4, 4))], P2),
    # NOTE: forward only: Paddle 3.3's backward of a window with index -1 writes outside the input's
    # gradient ("malloc(): invalid next size"), and the corrupted heap later hangs or aborts the process.
    OpCase(
        "max_pool2d_with_index_empty_window",
        lambda x: F.max_pool2d(x, [1, 2], [1, 3], padding=[0, 1], ceil_mode=True, return_mask=True),
        [Arg((2, 3, 4, 4))],
        IDX2,
        grad=False,
    ),
    # ---- max pools with indices ----
    OpCase("max_pool2d_with_index", lambda x: F.max_pool2d(x, 3, 2, 1, return_mask=True), [X], IDX2),
    OpCase(
        "max_pool2d_with_index_ceil",
        lambda x: F.max_pool2d(x, 2, 2, return_mask=True, ceil_mode=True),
        [Arg((2, 3, 7, 7))],
        IDX2,
    ),
    OpCase(
        "max_pool2d_with_index_f64",
        lambda x: F.max_pool2d(x, 2, return_mask=True),
        [Arg((2, 3, 6, 6), "float64")],
        IDX2,
    ),
    OpCase("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, [4, 5]), [Arg((2, 3, 7, 11))], IDX2),
    OpCase(
        "adaptive_max_pool2d_mask",
        lambda x: F.adaptive_max_pool2d(x, [3, 5], return_mask=True),
        [Arg((2, 3, 7, 11))],
        IDX2,
    ),
    OpCase("max_pool3d_with_index", lambda x: F.max_pool3d(x, 2, 2, 1, return_mask=True), [X3], IDX3),
    OpCase("adaptive_max_pool3d", lambda x: F.adaptive_max_pool3d(x, [2, 4, 3], return_mask=True), [X3], IDX3),
    # ---- lp pool, unpool ----
    OpCase("lp_pool2d", lambda x: F.lp_pool2d(x, 2, 3, 2), [Arg((2, 3, 9, 8), low=0.1, high=2.0)], ["pd_op.lp_pool2d"]),
    OpCase(
        "lp_pool2d_p3_ceil_nhwc",
        lambda x: F.lp_pool2d(x, 3, 2, ceil_mode=True, data_format="NHWC"),
        [Arg((2, 7, 7, 3), low=0.1, high=2.0)],
        ["pd_op.lp_pool2d"],
        rtol=1e-5,
        atol=1e-5,
        reason="Paddle accumulates x**p with powf",
    ),
    OpCase(
        "max_unpool2d",
        lambda x, y: F.max_unpool2d(x, F.max_pool2d(y, 2, return_mask=True)[1], 2),
        [Arg((2, 3, 4, 4)), Arg((2, 3, 8, 8), grad=False)],
        ["pd_op.unpool"] + IDX2,
    ),
    OpCase(
        "max_unpool2d_output_size",
        lambda x, y: F.max_unpool2d(x, F.max_pool2d(y, 2, return_mask=True)[1], 2, output_size=[9, 9]),
        [Arg((2, 3, 4, 4)), Arg((2, 3, 9, 9), grad=False)],
        ["pd_op.unpool"],
    ),
    OpCase(
        "max_unpool3d",
        lambda x, y: F.max_unpool3d(x, F.max_pool3d(y, 2, return_mask=True)[1], 2),
        [Arg((2, 3, 2, 3, 2)), Arg((2, 3, 4, 6, 4), grad=False)],
        ["pd_op.unpool3d"],
    ),
    # ---- fractional max pool (random_u fixed, so the windows are Paddle's) ----
    OpCase(
        "fractional_max_pool2d",
        lambda x: F.fractional_max_pool2d(x, [4, 5], random_u=0.3, return_mask=True),
        [Arg((2, 3, 9, 11))],
        ["pd_op.fractional_max_pool2d"],
    ),
    OpCase(
        "fractional_max_pool2d_kernel",
        lambda x: F.fractional_max_pool2d(x, 4, kernel_size=3, random_u=0.7),
        [Arg((2, 3, 9, 9))],
        ["pd_op.fractional_max_pool2d"],
    ),
    OpCase(
        "fractional_max_pool2d_f64",
        lambda x: F.fractional_max_pool2d(x, [3, 2], random_u=0.55),
        [Arg((1, 2, 7, 8), "float64")],
        ["pd_op.fractional_max_pool2d"],
    ),
    OpCase(
        "fractional_max_pool3d",
        lambda x: F.fractional_max_pool3d(x, [3, 4, 2], random_u=0.42, return_mask=True),
        [Arg((2, 2, 7, 9, 5))],
        ["pd_op.fractional_max_pool3d"],
    ),
    OpCase(
        "fractional_max_pool2d_random_u_runs",
        lambda x: F.fractional_max_pool2d(x, [4, 4]) * 0,
        [Arg((2, 3, 9, 9))],
        ["pd_op.fractional_max_pool2d"],
    ),
]
