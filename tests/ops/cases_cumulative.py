import paddle

from .harness import Arg, OpCase

_C = paddle._C_ops
X = Arg((3, 4, 5))
R = Arg((3, 6), low=-1.5, high=1.5)
Z = Arg((3, 6), low=0.0, high=0.0)

CASES = [
    # ---- cumsum: axis, flatten, exclusive, reverse ----
    OpCase("cumsum_axis", lambda x: paddle.cumsum(x, axis=1), [X], ["pd_op.cumsum"]),
    OpCase("cumsum_flatten", lambda x: paddle.cumsum(x), [X], ["pd_op.cumsum"]),
    OpCase("cumsum_exclusive", lambda x: _C.cumsum(x, 1, False, True, False), [X], ["pd_op.cumsum"]),
    OpCase("cumsum_reverse", lambda x: _C.cumsum(x, -1, False, False, True), [X], ["pd_op.cumsum"]),
    OpCase("cumsum_exclusive_reverse", lambda x: _C.cumsum(x, 0, False, True, True), [X], ["pd_op.cumsum"]),
    OpCase("cumsum_flatten_exclusive", lambda x: _C.cumsum(x, -1, True, True, False), [X], ["pd_op.cumsum"]),
    # a 0-d input stays 0-d (and unchanged, exclusive or not) unless flattened: Paddle's CPU kernels
    OpCase("cumsum_0d", lambda x: paddle.cumsum(x, axis=0), [Arg(())], ["pd_op.cumsum"]),
    OpCase("cumsum_0d_exclusive", lambda x: _C.cumsum(x, -1, False, True, False), [Arg(())], ["pd_op.cumsum"]),
    OpCase("cumsum_0d_flatten", lambda x: paddle.cumsum(x), [Arg(())], ["pd_op.cumsum"]),
    OpCase("cumprod_0d", lambda x: paddle.cumprod(x, dim=0), [Arg(())], ["pd_op.cumprod"]),
    OpCase("logcumsumexp_0d", lambda x: paddle.logcumsumexp(x, axis=0), [Arg(())], ["pd_op.logcumsumexp"]),
    OpCase("cumsum_int32", lambda x: paddle.cumsum(x, axis=0), [Arg((3, 4), "int32")], ["pd_op.cumsum"]),
    OpCase(
        "cumsum_int64_dtype",
        lambda x: paddle.cumsum(x, axis=1, dtype="int64"),
        [Arg((3, 4), "int32")],
        ["pd_op.cumsum"],
    ),
    OpCase("cumsum_f64", lambda x: paddle.cumsum(x, axis=-1), [Arg((3, 4), "float64")], ["pd_op.cumsum"]),
    # ---- cumprod ----
    OpCase("cumprod", lambda x: paddle.cumprod(x, dim=1), [Arg((3, 4, 5), low=0.5, high=1.5)], ["pd_op.cumprod"]),
    OpCase(
        "cumprod_f64_neg", lambda x: paddle.cumprod(x, dim=-1), [Arg((3, 4), "float64", -1.5, 1.5)], ["pd_op.cumprod"]
    ),
    OpCase(
        "cumprod_exclusive_reverse",
        lambda x: _C.cumprod(x, 0, True, True),
        [Arg((3, 4), low=0.5, high=1.5)],
        ["pd_op.cumprod"],
    ),
    OpCase("cumprod_int64", lambda x: paddle.cumprod(x, dim=0), [Arg((3, 4), "int64", -3, 3)], ["pd_op.cumprod"]),
    # ---- logcumsumexp ----
    OpCase("logcumsumexp", lambda x: paddle.logcumsumexp(x, axis=1), [X], ["pd_op.logcumsumexp"]),
    OpCase("logcumsumexp_flatten", lambda x: paddle.logcumsumexp(x), [X], ["pd_op.logcumsumexp"]),
    OpCase(
        "logcumsumexp_excl_rev",
        lambda x: _C.logcumsumexp(x, 0, False, True, True),
        [Arg((4, 3), "float64")],
        ["pd_op.logcumsumexp"],
    ),
    # ---- cummax / cummin (values and the latest index on ties) ----
    OpCase("cummax", lambda x: paddle.cummax(x, axis=1), [X], ["pd_op.cummax"]),
    OpCase("cummax_ties", lambda x, z, y: paddle.cummax(x * z + paddle.round(y), axis=-1), [R, Z, R], ["pd_op.cummax"]),
    OpCase(
        "cummin_ties_int32_index",
        lambda x, z, y: paddle.cummin(x * z + paddle.round(y), axis=0, dtype="int32"),
        [R, Z, R],
        ["pd_op.cummin"],
    ),
    OpCase("cummax_nan", lambda x: paddle.cummax(paddle.log(x), axis=1), [R], ["pd_op.cummax"]),
    OpCase("cummin_int64", lambda x: paddle.cummin(x, axis=-1), [Arg((3, 6), "int64", 0, 4)], ["pd_op.cummin"]),
    OpCase("cummin_f64", lambda x: paddle.cummin(x, axis=0), [Arg((3, 6), "float64")], ["pd_op.cummin"]),
]

CASES += [
    OpCase("cummax_empty", lambda x: paddle.cummax(x, axis=0), [Arg((0, 3))], ["pd_op.cummax"]),
    OpCase("cummin_empty", lambda x: paddle.cummin(x, axis=-1), [Arg((2, 0))], ["pd_op.cummin"]),
]

# Attributes no other case sets to a non-default value (test_attribute_coverage.py).
CASES += [
    OpCase("cummax_int32_index", lambda x: paddle.cummax(x, axis=1, dtype="int32"), [X], ["pd_op.cummax"]),
]
