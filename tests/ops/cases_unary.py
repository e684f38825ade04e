import paddle

from .harness import Arg, OpCase, Values

F16 = dict(rtol=2e-3, atol=2e-3, reason="float16 keeps ~3 decimal digits; Paddle and XLA round differently")
BF16 = dict(rtol=2e-2, atol=2e-2, reason="bfloat16 keeps ~2 decimal digits; Paddle and XLA round differently")
ANY = Arg((3, 4))
POS = Arg((3, 4), low=0.2, high=3.0)
UNIT = Arg((3, 4), low=-0.9, high=0.9)

# (name, paddle function, input, extra OpCase fields)
_FLOAT_OPS = [
    ("exp", paddle.exp, ANY, {}),
    ("expm1", paddle.expm1, ANY, {}),
    ("log", paddle.log, POS, {}),
    ("log1p", paddle.log1p, POS, {}),
    ("log2", paddle.log2, POS, {}),
    ("log10", paddle.log10, POS, {}),
    ("sqrt", paddle.sqrt, POS, {}),
    ("rsqrt", paddle.rsqrt, POS, {}),
    ("sin", paddle.sin, ANY, {}),
    ("cos", paddle.cos, ANY, {}),
    ("tan", paddle.tan, UNIT, {}),
    ("asin", paddle.asin, UNIT, {}),
    ("acos", paddle.acos, UNIT, {}),
    ("atan", paddle.atan, ANY, {}),
    ("sinh", paddle.sinh, ANY, {}),
    ("cosh", paddle.cosh, ANY, {}),
    ("tanh", paddle.tanh, ANY, {}),
    ("asinh", paddle.asinh, ANY, {}),
    ("acosh", paddle.acosh, Arg((3, 4), low=1.2, high=4.0), {}),
    ("atanh", paddle.atanh, UNIT, {}),
    ("erf", paddle.erf, ANY, {}),
    ("erfinv", paddle.erfinv, UNIT, {}),
    ("reciprocal", paddle.reciprocal, POS, {}),
    ("square", paddle.square, ANY, {}),
    ("abs", paddle.abs, ANY, {}),
    ("lgamma", paddle.lgamma, Arg((3, 4), low=-3.5, high=4.0), {}),
    ("digamma", paddle.digamma, POS, dict(rtol=1e-4, atol=1e-5, reason="digamma/trigamma series differ")),
    ("i0", paddle.i0, ANY, {}),
    ("i0e", paddle.i0e, ANY, {}),
    ("i1", paddle.i1, ANY, {}),
    ("i1e", paddle.i1e, ANY, {}),
    ("floor", paddle.floor, ANY, {}),
    ("ceil", paddle.ceil, ANY, {}),
    ("trunc", paddle.trunc, ANY, {}),
    ("round", paddle.round, Arg((3, 4), low=-4, high=4), {}),
]

CASES = [
    *[OpCase(n, lambda x, f=f: f(x), [a], [f"pd_op.{n}"], **kw) for n, f, a, kw in _FLOAT_OPS],
    *[
        OpCase(f"{n}_f64", lambda x, f=f: f(x), [Arg(a.shape, "float64", a.low, a.high)], [f"pd_op.{n}"])
        for n, f, a, kw in _FLOAT_OPS
    ],
    *[
        OpCase(f"{n}_int64", lambda x, f=f: f(x), [Arg((3, 4), "int64", 1, 5)], [f"pd_op.{n}"])
        for n, f in [
            ("exp", paddle.exp),
            ("sin", paddle.sin),
            ("log", paddle.log),
            ("tanh", paddle.tanh),
            ("abs", paddle.abs),
            ("floor", paddle.floor),
            ("square", paddle.square),
        ]
    ],
    OpCase("abs_int32_neg", lambda x: paddle.abs(x), [Arg((3, 4), "int32", -5, 5)], ["pd_op.abs"]),
    OpCase("abs_at_zero", lambda x, z: paddle.abs(x * z), [ANY, Arg((3, 4), low=0.0, high=0.0)], ["pd_op.abs"]),
    OpCase("sqrt_int32_cast", lambda x: paddle.sqrt(x), [Arg((3, 4), "int32", 1, 9)], ["pd_op.cast", "pd_op.sqrt"]),
    OpCase("exp_f16", lambda x: paddle.exp(x), [Arg((3, 4), "float16")], ["pd_op.exp"], grad=False, **F16),
    OpCase("log_bf16", lambda x: paddle.log(x), [Arg((3, 4), "bfloat16", 0.2, 3.0)], ["pd_op.log"], grad=False, **BF16),
    OpCase("erf_f16", lambda x: paddle.erf(x), [Arg((3, 4), "float16")], ["pd_op.erf"], **F16),
    OpCase("floor_bf16", lambda x: paddle.floor(x), [Arg((3, 4), "bfloat16", -3, 3)], ["pd_op.floor"], **BF16),
    OpCase("round_decimals", lambda x: paddle.round(x, decimals=2), [ANY], ["pd_op.round"]),
    OpCase(
        "round_neg_decimals_f64",
        lambda x: paddle.round(x, decimals=-1),
        [Arg((3, 4), "float64", -40, 40)],
        ["pd_op.round"],
    ),
    OpCase(
        "round_half_even",
        lambda x: paddle.round(paddle.floor(x * 4) / 2),
        [Arg((4, 5), low=-3, high=3)],
        ["pd_op.round"],
    ),
    OpCase("isnan", lambda x: paddle.isnan(paddle.log(x)), [ANY], ["pd_op.isnan"]),
    OpCase("isinf", lambda x: paddle.isinf(1 / paddle.floor(x)), [ANY], ["pd_op.isinf"]),
    OpCase("isfinite", lambda x: paddle.isfinite(paddle.log(x)), [ANY], ["pd_op.isfinite"]),
    OpCase("isnan_int64", lambda x: paddle.isnan(x), [Arg((3, 4), "int64")], ["pd_op.isnan"]),
    OpCase("logit", lambda x: paddle.logit(x), [Arg((3, 4), low=0.05, high=0.95)], ["pd_op.logit"]),
    OpCase("logit_eps", lambda x: paddle.logit(x, eps=0.2), [Arg((3, 4), low=0.01, high=0.99)], ["pd_op.logit"]),
    OpCase(
        "polygamma_1",
        lambda x: paddle.polygamma(x, 1),
        [POS],
        ["pd_op.polygamma"],
        rtol=1e-4,
        atol=1e-5,
        reason="polygamma series differ",
    ),
    OpCase(
        "polygamma_2_f64",
        lambda x: paddle.polygamma(x, 2),
        [Arg((3, 4), "float64", 0.5, 3)],
        ["pd_op.polygamma"],
        grad=False,
    ),
    OpCase("angle", lambda x: paddle.angle(x), [ANY], ["pd_op.angle"]),
]

CASES += [
    OpCase("gammaln", lambda x: paddle.gammaln(x), [Arg((3, 4), low=0.2, high=5.0)], ["pd_op.gammaln"]),
    OpCase(
        "gammaincc",
        lambda a, x: paddle.gammaincc(a, x),
        [Arg((3, 4), low=0.5, high=3.0), Arg((3, 4), low=0.1, high=4.0)],
        ["pd_op.gammaincc"],
        rtol=1e-4,
        atol=1e-5,
        reason="incomplete-gamma series and continued fractions differ",
    ),
    OpCase(
        "gammainc_f64",
        lambda a, x: paddle.gammainc(a, x),
        [Arg((3, 4), "float64", 0.5, 3.0), Arg((3, 4), "float64", 0.1, 4.0)],
        ["pd_op.gammaincc"],
        rtol=1e-6,
        atol=1e-8,
        reason="incomplete-gamma series and continued fractions differ",
    ),
]

# Special functions at the edges of their domains (found by tests/fuzz): values and gradients.
_EDGES = (2.0, -2.0, float("inf"), -float("inf"), 1.0, -1.0, 0.0, -0.0, 0.5, float("nan"), -3.0, 1.5)
CASES += [
    OpCase("erfinv_outside_domain", lambda x: paddle.erfinv(x), [Values((12,), values=_EDGES)], ["pd_op.erfinv"]),
    OpCase("digamma_poles", lambda x: paddle.digamma(x), [Values((12,), values=_EDGES)], ["pd_op.digamma"]),
    OpCase(
        "digamma_poles_f64", lambda x: paddle.digamma(x), [Values((12,), "float64", values=_EDGES)], ["pd_op.digamma"]
    ),
    OpCase(
        "lgamma_poles",
        lambda x: paddle.lgamma(x),
        [Values((12,), values=_EDGES)],
        ["pd_op.lgamma"],
        reason="float32 lgamma(1) is 4.8e-7 here, 0 in Paddle (documented)",
    ),
]
