import paddle

from .harness import Arg, OpCase, Values

_C = paddle._C_ops
F16 = dict(rtol=2e-3, atol=2e-3, reason="float16 keeps ~3 decimal digits; Paddle and XLA round differently")
BF16 = dict(rtol=2e-2, atol=2e-2, reason="bfloat16 keeps ~2 decimal digits; Paddle and XLA round differently")
POS = Arg((3, 4), low=0.5, high=2.0)


# NOTE: ties on purpose: x * z and y * z with z == 0 are equal (0) yet differentiable, and the
# gradient z receives (x * share_x + y * share_y) shows how the op splits it between its operands.
ZERO = Arg((3, 4), low=0.0, high=0.0)


INF, NAN = float("inf"), float("nan")

CASES = [
    # ---- add / subtract / multiply / divide ----
    OpCase("add_broadcast", lambda x, y: paddle.add(x, y), [Arg((2, 3, 4)), Arg((4,))], ["pd_op.add"]),
    OpCase("add_int64", lambda x, y: x + y, [Arg((3, 4), "int64"), Arg((3, 4), "int64")], ["pd_op.add"]),
    OpCase("add_int32_bcast", lambda x, y: x + y, [Arg((3, 4), "int32"), Arg((1, 4), "int32")], ["pd_op.add"]),
    OpCase("add_scalar_0d", lambda x, y: x + y, [Arg(()), Arg((2, 3))], ["pd_op.add"]),
    OpCase("subtract", lambda x, y: x - y, [Arg((2, 3)), Arg((2, 1))], ["pd_op.subtract"]),
    OpCase("subtract_int64", lambda x, y: x - y, [Arg((2, 3), "int64"), Arg((3,), "int64")], ["pd_op.subtract"]),
    OpCase("multiply_f64", lambda x, y: x * y, [Arg((2, 3), "float64"), Arg((2, 3), "float64")], ["pd_op.multiply"]),
    OpCase("multiply_bcast_both", lambda x, y: x * y, [Arg((4, 1, 3)), Arg((2, 1))], ["pd_op.multiply"]),
    OpCase(
        "multiply_bool",
        lambda x, y: paddle.multiply(x, y),
        [Arg((2, 3), "bool"), Arg((2, 3), "bool")],
        ["pd_op.multiply"],
    ),
    OpCase(
        "multiply_bf16",
        lambda x, y: x * y,
        [Arg((3, 4), "bfloat16"), Arg((3, 4), "bfloat16")],
        ["pd_op.multiply"],
        **BF16,
    ),
    OpCase("divide", lambda x, y: x / y, [Arg((3, 4)), POS], ["pd_op.divide"]),
    OpCase(
        "divide_bcast_f64",
        lambda x, y: paddle.divide(x, y),
        [Arg((2, 3, 4), "float64"), Arg((4,), "float64", low=0.5, high=2.0)],
        ["pd_op.divide"],
    ),
    OpCase(
        "divide_int_to_float",
        lambda x, y: x / y,
        [Arg((3, 4), "int64", -9, 9), Arg((3, 4), "int64", 1, 5)],
        ["pd_op.cast", "pd_op.divide"],
    ),
    # ---- floor_divide / remainder ----
    OpCase(
        "floor_divide_int64",
        lambda x, y: x // y,
        [Arg((4, 5), "int64", -20, 20), Arg((4, 5), "int64", 1, 6)],
        ["pd_op.floor_divide"],
    ),
    OpCase(
        "floor_divide_int32_neg",
        lambda x, y: x // y,
        [Arg((4, 5), "int32", -20, 20), Arg((4, 5), "int32", -6, -1)],
        ["pd_op.floor_divide"],
    ),
    OpCase(
        "floor_divide_f32",
        lambda x, y: paddle.floor_divide(x, y),
        [Arg((4, 5), low=-10, high=10), Arg((4, 5), low=-3, high=-0.5)],
        ["pd_op.floor_divide"],
    ),
    OpCase(
        "remainder_f32",
        lambda x, y: x % y,
        [Arg((4, 5), low=-10, high=10), Arg((4, 5), low=0.5, high=3)],
        ["pd_op.remainder"],
    ),
    OpCase(
        "remainder_f32_neg_divisor",
        lambda x, y: paddle.remainder(x, y),
        [Arg((4, 5), low=-10, high=10), Arg((5,), low=-3, high=-0.5)],
        ["pd_op.remainder"],
    ),
    OpCase(
        "remainder_int64",
        lambda x, y: x % y,
        [Arg((4, 5), "int64", -20, 20), Arg((4, 5), "int64", -5, -1)],
        ["pd_op.remainder"],
    ),
    OpCase(
        "remainder_int32",
        lambda x, y: paddle.floor_mod(x, y),
        [Arg((4, 5), "int32", -20, 20), Arg((4, 5), "int32", 1, 6)],
        ["pd_op.remainder"],
    ),
    # ---- maximum / minimum / fmax / fmin ----
    OpCase("maximum", lambda x, y: paddle.maximum(x, y), [Arg((3, 4)), Arg((3, 4))], ["pd_op.maximum"]),
    OpCase(
        "maximum_ties",
        lambda x, y, z: paddle.maximum(x * z, y * z),
        [Arg((3, 4)), Arg((3, 4)), ZERO],
        ["pd_op.maximum"],
    ),
    OpCase(
        "maximum_int64_bcast",
        lambda x, y: paddle.maximum(x, y),
        [Arg((3, 4), "int64"), Arg((4,), "int64")],
        ["pd_op.maximum"],
    ),
    OpCase(
        "minimum",
        lambda x, y: paddle.minimum(x, y),
        [Arg((3, 4), "float64"), Arg((1, 4), "float64")],
        ["pd_op.minimum"],
    ),
    OpCase(
        "minimum_ties",
        lambda x, y, z: paddle.minimum(x * z, y * z),
        [Arg((3, 4)), Arg((3, 4)), ZERO],
        ["pd_op.minimum"],
    ),
    OpCase("fmax", lambda x, y: paddle.fmax(x, y), [Arg((3, 4)), Arg((3, 4))], ["pd_op.fmax"]),
    OpCase("fmax_ties", lambda x, y, z: paddle.fmax(x * z, y * z), [Arg((3, 4)), Arg((3, 4)), ZERO], ["pd_op.fmax"]),
    OpCase("fmin_ties", lambda x, y, z: paddle.fmin(x * z, y * z), [Arg((3, 4)), Arg((3, 4)), ZERO], ["pd_op.fmin"]),
    OpCase("fmax_nan", lambda x, y: paddle.fmax(x, paddle.log(y)), [Arg((3, 4)), Arg((3, 4))], ["pd_op.fmax"]),
    OpCase("fmin_nan_bcast", lambda x, y: paddle.fmin(paddle.sqrt(x), y), [Arg((3, 4)), Arg((4,))], ["pd_op.fmin"]),
    OpCase("fmin_int64", lambda x, y: paddle.fmin(x, y), [Arg((3, 4), "int64"), Arg((3, 4), "int64")], ["pd_op.fmin"]),
    # ---- powers ----
    OpCase("elementwise_pow", lambda x, y: x**y, [POS, Arg((3, 4), low=-2, high=2)], ["pd_op.elementwise_pow"]),
    OpCase("pow_const_2_negative_base", lambda x: x**2, [Arg((3, 4))], ["pd_op.elementwise_pow"]),
    OpCase("pow_const_base", lambda x: 2**x, [Arg((3, 4))], ["pd_op.elementwise_pow"]),
    OpCase("pow_const_half", lambda x: x**0.5, [POS], ["pd_op.elementwise_pow"]),
    OpCase(
        "elementwise_pow_int64",
        lambda x, y: paddle.pow(x, y),
        [Arg((3, 4), "int64", -4, 5), Arg((3, 4), "int64", 0, 6)],
        ["pd_op.elementwise_pow"],
    ),
    OpCase(
        "elementwise_pow_int32_neg_exp",
        lambda x, y: paddle.pow(x, y),
        [Arg((3, 4), "int32", -2, 3), Arg((3, 4), "int32", -3, 3)],
        ["pd_op.elementwise_pow"],
    ),
    OpCase("pow_scalar", lambda x: paddle.pow(x, 3.0), [Arg((3, 4))], ["pd_op.pow"]),
    OpCase("pow_scalar_frac", lambda x: paddle.pow(x, 1.7), [POS], ["pd_op.pow"]),
    OpCase("pow_scalar_f64", lambda x: paddle.pow(x, -1.5), [Arg((3, 4), "float64", 0.5, 2.0)], ["pd_op.pow"]),
    OpCase("pow_scalar_int64", lambda x: paddle.pow(x, 2.7), [Arg((3, 4), "int64", -5, 5)], ["pd_op.pow"]),
    OpCase("atan2", lambda x, y: paddle.atan2(x, y), [Arg((3, 4)), Arg((3, 4))], ["pd_op.atan2"]),
    OpCase(
        "atan2_int64",
        lambda x, y: paddle.atan2(x, y),
        [Arg((3, 4), "int64", -3, 3), Arg((3, 4), "int64", -3, 3)],
        ["pd_op.atan2"],
    ),
    # ---- scale (x * s + b, -x, x / 2, 1 - x ...) ----
    OpCase("scale_add_const", lambda x: x + 1, [Arg((3, 4))], ["pd_op.scale"]),
    OpCase("scale_rsub", lambda x: 1 - x, [Arg((3, 4))], ["pd_op.scale"]),
    OpCase("scale_neg", lambda x: -x, [Arg((3, 4), "float64")], ["pd_op.scale"]),
    OpCase("scale_div_const", lambda x: x / 2, [Arg((3, 4))], ["pd_op.scale"]),
    OpCase(
        "scale_bias_before", lambda x: paddle.scale(x, 2.0, 1.5, bias_after_scale=False), [Arg((3, 4))], ["pd_op.scale"]
    ),
    OpCase("scale_tensor_factor", lambda x, s: paddle.scale(x, s, 0.5), [Arg((3, 4)), Arg((1,))], ["pd_op.scale"]),
    OpCase("scale_0d", lambda x: x * 3, [Arg(())], ["pd_op.scale"]),
    OpCase("scale_int64", lambda x: paddle.scale(x, 2.5, 1.7), [Arg((3, 4), "int64", -9, 9)], ["pd_op.scale"]),
    OpCase("scale_int32_neg", lambda x: -x, [Arg((3, 4), "int32", -9, 9)], ["pd_op.scale"]),
    OpCase("scale_f16", lambda x: x * 3 + 1, [Arg((3, 4), "float16")], ["pd_op.scale"], **F16),
    OpCase("scale_bf16", lambda x: x * 0.3 - 2, [Arg((3, 4), "bfloat16")], ["pd_op.scale"], **BF16),
    # ---- cast ----
    *[
        OpCase(
            f"cast_f32_to_{d}",
            lambda x, d=d: x.astype(d),
            [Arg((3, 4), low=-5, high=5)],
            ["pd_op.cast"],
            **(F16 if d == "float16" else BF16 if d == "bfloat16" else {}),
        )
        for d in ("float64", "float16", "bfloat16", "int32", "int64", "bool", "uint8", "int8")
    ],
    *[
        OpCase(f"cast_{d}_to_f32", lambda x: x.astype("float32"), [Arg((3, 4), d)], ["pd_op.cast"])
        for d in ("float64", "float16", "bfloat16", "int32", "int64", "bool")
    ],
    OpCase("cast_int64_to_bool", lambda x: x.astype("bool"), [Arg((3, 4), "int64", -2, 2)], ["pd_op.cast"]),
    OpCase("cast_bool_to_int32", lambda x: x.astype("int32"), [Arg((3, 4), "bool")], ["pd_op.cast"]),
    # ---- clip / sign / increment ----
    OpCase("clip", lambda x: paddle.clip(x, -0.5, 0.5), [Arg((3, 4))], ["pd_op.clip"]),
    OpCase(
        "clip_on_bounds",
        lambda x, z: paddle.clip(x * z + 0.5, -0.5, 0.5) + paddle.clip(x * z - 0.5, -0.5, 0.5),
        [Arg((3, 4)), ZERO],
        ["pd_op.clip"],
    ),
    OpCase("clip_max_only_f64", lambda x: paddle.clip(x, max=0.3), [Arg((3, 4), "float64")], ["pd_op.clip"]),
    OpCase(
        "clip_tensor_bounds",
        lambda x, lo, hi: paddle.clip(x, lo, hi),
        [Arg((3, 4)), Arg((1,), low=-1, high=-0.5), Arg((1,), low=0.5, high=1)],
        ["pd_op.clip"],
    ),
    # NaN stays NaN (Paddle's ClipFunctor compares, and NaN fails both comparisons), with either bound alone too
    OpCase("clip_nan", lambda x: paddle.clip(paddle.log(x), 0.0, 1.0), [Arg((3, 4))], ["pd_op.clip"]),
    OpCase("clip_nan_min_only", lambda x: paddle.clip(paddle.log(x), min=0.0), [Arg((3, 4))], ["pd_op.clip"]),
    OpCase("clip_int64", lambda x: paddle.clip(x, 1, 3), [Arg((3, 4), "int64", -5, 8)], ["pd_op.clip"]),
    OpCase("sign", lambda x: paddle.sign(x), [Arg((3, 4))], ["pd_op.sign"]),
    OpCase("sign_int64", lambda x: paddle.sign(x), [Arg((3, 4), "int64", -3, 3)], ["pd_op.sign"]),
    OpCase("sign_f64_zero", lambda x: paddle.sign(paddle.round(x)), [Arg((3, 4), "float64")], ["pd_op.sign"]),
    # NOTE: paddle.increment emits pd_op.increment_ (in place), which capture does not map yet.
    OpCase("increment", lambda x: _C.increment(x, 2.5), [Arg((1,))], ["pd_op.increment"]),
    OpCase("increment_int64", lambda x: _C.increment(x, 1.0), [Arg((1,), "int64")], ["pd_op.increment"]),
    # ---- heaviside / copysign / nextafter / lerp ----
    OpCase(
        "heaviside", lambda x, y: paddle.heaviside(paddle.round(x), y), [Arg((3, 4)), Arg((3, 4))], ["pd_op.heaviside"]
    ),
    OpCase("copysign", lambda x, y: paddle.copysign(x, y), [Arg((3, 4)), Arg((3, 4))], ["pd_op.copysign"]),
    OpCase(
        "copysign_f64_bcast",
        lambda x, y: paddle.copysign(x, y),
        [Arg((3, 4), "float64"), Arg((4,), "float64")],
        ["pd_op.copysign"],
    ),
    OpCase("nextafter", lambda x, y: paddle.nextafter(x, y), [Arg((3, 4)), Arg((3, 4))], ["pd_op.nextafter"]),
    OpCase("lerp_scalar", lambda x, y: paddle.lerp(x, y, 0.3), [Arg((3, 4)), Arg((3, 4))], ["pd_op.lerp"]),
    OpCase(
        "lerp_tensor_weight",
        lambda x, y, w: paddle.lerp(x, y, w),
        [Arg((3, 4)), Arg((3, 4)), Arg((4,))],
        ["pd_op.lerp"],
    ),
]

CASES += [
    OpCase("add_n", lambda x, y, z: paddle.add_n([x, y, z]), [Arg((3, 4)), Arg((3, 4)), Arg((3, 4))], ["pd_op.add_n"]),
    OpCase(
        "add_n_int64", lambda x, y: paddle.add_n([x, y]), [Arg((3, 4), "int64"), Arg((3, 4), "int64")], ["pd_op.add_n"]
    ),
]

CASES += [
    OpCase(
        "copysign_at_zero",
        lambda x, y, z: paddle.copysign(x * z, y),
        [Arg((3, 4)), Arg((3, 4)), ZERO],
        ["pd_op.copysign"],
    ),
    OpCase(
        "copysign_int64",
        lambda x, y: paddle.copysign(x, y),
        [Arg((3, 4), "int64", -3, 3), Arg((3, 4), "int64", -3, 3)],
        ["pd_op.copysign"],
    ),
    OpCase(
        "heaviside_int64",
        lambda x, y: paddle.heaviside(x, y),
        [Arg((3, 4), "int64", -2, 2), Arg((3, 4), "int64", -3, 3)],
        ["pd_op.heaviside"],
    ),
]

# Float -> integer casts out of range, as Paddle's CPU kernel does them on x86-64: through a 32-bit
# (64-bit for int64) integer, out of range and NaN giving its most negative value, narrow types wrapping.
_OUT_OF_RANGE = (3e9, -3e9, 1e20, NAN, INF, -INF, -2.5, 2147483520.0)
CASES += [
    OpCase(
        "cast_f32_int32_out_of_range",
        lambda x: x.astype("int32"),
        [Values((8,), values=_OUT_OF_RANGE)],
        ["pd_op.cast"],
        grad=False,
    ),
    OpCase(
        "cast_f32_int64_out_of_range",
        lambda x: x.astype("int64"),
        [Values((8,), values=_OUT_OF_RANGE)],
        ["pd_op.cast"],
        grad=False,
    ),
    OpCase(
        "cast_f64_int32_out_of_range",
        lambda x: x.astype("int32"),
        [Values((8,), "float64", values=_OUT_OF_RANGE)],
        ["pd_op.cast"],
        grad=False,
    ),
    OpCase(
        "cast_f16_int32_inf_nan",
        lambda x: x.astype("int32"),
        [Values((4,), "float16", values=(INF, NAN, 6e4, -INF))],
        ["pd_op.cast"],
        grad=False,
    ),
    OpCase(
        "cast_f32_uint8_wraps",
        lambda x: x.astype("uint8"),
        [Values((6,), values=(300.0, -1.0, 256.5, 3e9, NAN, -1.7))],
        ["pd_op.cast"],
        grad=False,
    ),
    OpCase(
        "cast_f32_int16_wraps",
        lambda x: x.astype("int16"),
        [Values((4,), values=(70000.0, -40000.0, 3e9, NAN))],
        ["pd_op.cast"],
        grad=False,
    ),
]
