import paddle

from .harness import Arg, OpCase

_C = paddle._C_ops
X = Arg((3, 4, 5))
R = Arg((3, 6), low=-1.5, high=1.5)
Z = Arg((3, 6), low=0.0, high=0.0)


def _tied(x, z, y):
    # NOTE: round(y) has many equal values and z == 0 keeps them exact, so ties are tested; the
    # gradient z gets (x at the chosen index) shows which of the tied elements Paddle picks.
    return x * z + paddle.round(y)


CASES = [
    # ---- kthvalue ----
    OpCase("kthvalue", lambda x: paddle.kthvalue(x, 2, axis=1), [X], ["pd_op.kthvalue"]),
    OpCase("kthvalue_keepdim_last", lambda x: paddle.kthvalue(x, 5, axis=-1, keepdim=True), [X], ["pd_op.kthvalue"]),
    # NOTE: on ties Paddle's index comes from std::nth_element (unspecified order): values only.
    OpCase(
        "kthvalue_ties",
        lambda x, z, y: paddle.kthvalue(_tied(x, z, y), 3, axis=1),
        [R, Z, R],
        ["pd_op.kthvalue"],
        outputs=[0],
        grad=False,
    ),
    OpCase("kthvalue_f64", lambda x: paddle.kthvalue(x, 1, axis=0), [Arg((3, 4), "float64")], ["pd_op.kthvalue"]),
    OpCase(
        "kthvalue_int64",
        lambda x: paddle.kthvalue(x, 2, axis=1),
        [Arg((3, 6), "int64", 0, 4)],
        ["pd_op.kthvalue"],
        outputs=[0],
    ),
    # ---- mode ----
    OpCase("mode", lambda x, z, y: paddle.mode(_tied(x, z, y), axis=1), [R, Z, R], ["pd_op.mode"]),
    OpCase(
        "mode_keepdim_axis0",
        lambda x, z, y: paddle.mode(_tied(x, z, y), axis=0, keepdim=True),
        [R, Z, R],
        ["pd_op.mode"],
    ),
    OpCase("mode_int64", lambda x: paddle.mode(x, axis=-1), [Arg((4, 7), "int64", 0, 4)], ["pd_op.mode"]),
    OpCase("mode_distinct", lambda x: paddle.mode(x, axis=-1), [X], ["pd_op.mode"]),
    # ---- median / nanmedian ----
    OpCase("median_even", lambda x: paddle.median(x, axis=1), [Arg((3, 4))], ["pd_op.median"]),
    OpCase("median_odd", lambda x: paddle.median(x, axis=-1), [X], ["pd_op.median"]),
    OpCase("median_all", lambda x: paddle.median(x), [X], ["pd_op.median"]),
    OpCase("median_keepdim", lambda x: paddle.median(x, axis=0, keepdim=True), [X], ["pd_op.median"]),
    OpCase("median_min", lambda x: paddle.median(x, axis=1, mode="min"), [Arg((3, 4))], ["pd_op.median"]),
    OpCase(
        "median_min_keepdim",
        lambda x: paddle.median(x, axis=1, keepdim=True, mode="min"),
        [Arg((3, 4))],
        ["pd_op.median"],
    ),
    OpCase(
        "median_ties",
        lambda x, z, y: _C.median(_tied(x, z, y), [1], False, "avg"),
        [R, Z, R],
        ["pd_op.median"],
        outputs=[0],
        grad=False,
    ),
    OpCase("median_f64_all_min", lambda x: _C.median(x, [], False, "min"), [Arg((3, 4), "float64")], ["pd_op.median"]),
    # NOTE: with a NaN, Paddle's "avg" kernel leaves one of the two indices unset: values only there.
    OpCase(
        "median_nan",
        lambda x: paddle.median(paddle.log(x), axis=1),
        [Arg((4, 5))],
        ["pd_op.median"],
        outputs=[0],
        grad=False,
    ),
    OpCase(
        "median_nan_min", lambda x: paddle.median(paddle.log(x), axis=1, mode="min"), [Arg((4, 5))], ["pd_op.median"]
    ),
    OpCase("nanmedian", lambda x: paddle.nanmedian(paddle.log(x), axis=1), [Arg((4, 5))], ["pd_op.nanmedian"]),
    OpCase("nanmedian_all", lambda x: paddle.nanmedian(paddle.log(x)), [Arg((4, 5))], ["pd_op.nanmedian"]),
    OpCase(
        "nanmedian_min",
        lambda x: paddle.nanmedian(paddle.log(x), axis=-1, mode="min"),
        [Arg((4, 6))],
        ["pd_op.nanmedian"],
    ),
]

CASES += [
    OpCase("median_0d", lambda x: paddle.median(x), [Arg(())], ["pd_op.median"]),
    OpCase("median_0d_index", lambda x: _C.median(x, [], False, "avg"), [Arg(())], ["pd_op.median"]),
    OpCase("median_0d_min", lambda x: paddle.median(x, mode="min"), [Arg(())], ["pd_op.median"]),
]

# Attributes no other case sets to a non-default value (test_attribute_coverage.py).
CASES += [
    OpCase(
        "nanmedian_keepdim",
        lambda x: paddle.nanmedian(paddle.log(x), axis=1, keepdim=True),
        [Arg((4, 5))],
        ["pd_op.nanmedian"],
    ),
]
