import paddle

from .harness import Arg, OpCase, Values

# NOTE: round() makes equal values common, so == and <= have cases that are actually true.
_CMP = [
    ("equal", lambda x, y: x == y),
    ("not_equal", lambda x, y: x != y),
    ("less_than", lambda x, y: x < y),
    ("less_equal", lambda x, y: x <= y),
    ("greater_than", lambda x, y: x > y),
    ("greater_equal", lambda x, y: x >= y),
]
R = Arg((3, 4), low=-2, high=2)


def _rounded(f):
    return lambda x, y: f(paddle.round(x), paddle.round(y))


INF, NAN = float("inf"), float("nan")

CASES = [
    *[OpCase(op, _rounded(f), [R, R], [f"pd_op.{op}", "pd_op.round"]) for op, f in _CMP],
    *[
        OpCase(f"{op}_int64_bcast", f, [Arg((3, 4), "int64", 0, 3), Arg((4,), "int64", 0, 3)], [f"pd_op.{op}"])
        for op, f in _CMP
    ],
    *[
        OpCase(f"{op}_f64_const", lambda x, f=f: f(x, 0.5), [Arg((3, 4), "float64", 0, 1)], [f"pd_op.{op}"])
        for op, f in _CMP
    ],
    OpCase("equal_bool", lambda x, y: x == y, [Arg((3, 4), "bool"), Arg((3, 4), "bool")], ["pd_op.equal"]),
    OpCase("less_than_int32", lambda x, y: x < y, [Arg((3, 4), "int32"), Arg((3, 4), "int32")], ["pd_op.less_than"]),
    # ---- logic ----
    *[
        OpCase(
            f"logical_{op}",
            lambda x, y, op=op: getattr(paddle, f"logical_{op}")(x, y),
            [Arg((3, 4), "bool"), Arg((3, 4), "bool")],
            [f"pd_op.logical_{op}"],
        )
        for op in ("and", "or", "xor")
    ],
    OpCase(
        "logical_and_float",
        lambda x, y: paddle.logical_and(paddle.floor(x), paddle.floor(y)),
        [Arg((3, 4), low=-1, high=2), Arg((3, 4), low=-1, high=2)],
        ["pd_op.logical_and"],
    ),
    OpCase(
        "logical_or_int_bcast",
        lambda x, y: paddle.logical_or(x, y),
        [Arg((3, 4), "int32", 0, 2), Arg((4,), "int32", 0, 2)],
        ["pd_op.logical_or"],
    ),
    OpCase("logical_not", lambda x: paddle.logical_not(x), [Arg((3, 4), "bool")], ["pd_op.logical_not"]),
    OpCase("logical_not_float", lambda x: paddle.logical_not(paddle.round(x)), [R], ["pd_op.logical_not"]),
    # ---- bitwise ----
    *[
        OpCase(
            f"bitwise_{op}_{dt}",
            lambda x, y, op=op: getattr(paddle, f"bitwise_{op}")(x, y),
            [Arg((3, 4), dt, -50, 50), Arg((3, 4), dt, -50, 50)],
            [f"pd_op.bitwise_{op}"],
        )
        for op in ("and", "or", "xor")
        for dt in ("int32", "int64")
    ],
    OpCase("bitwise_and_bool", lambda x, y: x & y, [Arg((3, 4), "bool"), Arg((3, 4), "bool")], ["pd_op.bitwise_and"]),
    OpCase(
        "bitwise_or_uint8",
        lambda x, y: x | y,
        [Arg((3, 4), "uint8", 0, 255), Arg((3, 4), "uint8", 0, 255)],
        ["pd_op.bitwise_or"],
    ),
    OpCase("bitwise_not_int64", lambda x: ~x, [Arg((3, 4), "int64", -50, 50)], ["pd_op.bitwise_not"]),
    OpCase("bitwise_not_bool", lambda x: ~x, [Arg((3, 4), "bool")], ["pd_op.bitwise_not"]),
    OpCase(
        "bitwise_left_shift",
        lambda x, y: paddle.bitwise_left_shift(x, y),
        [Arg((3, 4), "int32", -50, 50), Arg((3, 4), "int32", 0, 8)],
        ["pd_op.bitwise_left_shift"],
    ),
    OpCase(
        "bitwise_right_shift",
        lambda x, y: paddle.bitwise_right_shift(x, y),
        [Arg((3, 4), "int64", -50, 50), Arg((3, 4), "int64", 0, 8)],
        ["pd_op.bitwise_right_shift"],
    ),
    OpCase(
        "bitwise_right_shift_logical",
        lambda x, y: paddle.bitwise_right_shift(x, y, is_arithmetic=False),
        [Arg((3, 4), "int32", -50, 50), Arg((3, 4), "int32", 0, 8)],
        ["pd_op.bitwise_right_shift"],
    ),
    # ---- closeness ----
    OpCase("isclose", lambda x, y: paddle.isclose(x, x + y * 1e-5), [Arg((3, 4)), Arg((3, 4))], ["pd_op.isclose"]),
    OpCase(
        "isclose_nan",
        lambda x, y: paddle.isclose(paddle.log(x), paddle.log(y), equal_nan=True),
        [Arg((3, 4)), Arg((3, 4))],
        ["pd_op.isclose"],
    ),
    OpCase(
        "isclose_f64_tol",
        lambda x, y: paddle.isclose(x, x + y * 1e-3, rtol=1e-2, atol=1e-3),
        [Arg((3, 4), "float64"), Arg((3, 4), "float64")],
        ["pd_op.isclose"],
    ),
    OpCase("allclose_true", lambda x: paddle.allclose(x, x * 1.0000001), [Arg((3, 4))], ["pd_op.allclose"]),
    OpCase("allclose_false", lambda x, y: paddle.allclose(x, y), [Arg((3, 4)), Arg((3, 4))], ["pd_op.allclose"]),
    OpCase("equal_all_true", lambda x: paddle.equal_all(x, x * 1), [Arg((3, 4))], ["pd_op.equal_all"]),
    OpCase(
        "equal_all_false",
        lambda x, y: paddle.equal_all(x, y),
        [Arg((3, 4), "int64", 0, 2), Arg((3, 4), "int64", 0, 2)],
        ["pd_op.equal_all"],
    ),
]

# Paddle's isclose arithmetic: an infinite y is close to every finite x (|x - y| = inf <= atol + rtol
# * inf), an infinite x to a finite y never; NaN only with equal_nan.
_XS = (1.0, INF, -INF, 1.0, INF, 3.0, -INF, NAN, 2.0, 0.0)
_YS = (INF, INF, INF, -INF, 1.0, 3.0, 5.0, NAN, NAN, -INF)
CASES += [
    OpCase(
        "isclose_infinities",
        lambda x, y: paddle.isclose(x, y),
        [Values((10,), values=_XS), Values((10,), values=_YS)],
        ["pd_op.isclose"],
    ),
    OpCase(
        "isclose_infinities_f64_equal_nan",
        lambda x, y: paddle.isclose(x, y, rtol=0.0, atol=0.0, equal_nan=True),
        [Values((10,), "float64", values=_XS), Values((10,), "float64", values=_YS)],
        ["pd_op.isclose"],
    ),
    OpCase(
        "allclose_inf_y",
        lambda x, y: paddle.allclose(x, y),
        [Values((2,), values=(1.0, 2.0)), Values((2,), values=(INF, -INF))],
        ["pd_op.allclose"],
    ),
]

# Attributes no other case sets to a non-default value (test_attribute_coverage.py).
CASES += [
    OpCase(
        "allclose_equal_nan",
        lambda x, y: paddle.allclose(x, y, equal_nan=True),
        [Values((3,), values=(NAN, 1.0, 2.0)), Values((3,), values=(NAN, 1.0, 2.0000001))],
        ["pd_op.allclose"],
    ),
    OpCase(
        "bitwise_left_shift_logical",
        lambda x, y: paddle.bitwise_left_shift(x, y, is_arithmetic=False),
        [Arg((3, 4), "int32", -50, 50), Arg((3, 4), "int32", 0, 8)],
        ["pd_op.bitwise_left_shift"],
    ),
]
