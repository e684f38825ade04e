import paddle

from .harness import Arg, OpCase

_C = paddle._C_ops
X = Arg((3, 4, 5))
Z = Arg((3, 4, 5), low=0.0, high=0.0)
R = Arg((3, 4, 5), low=-1.5, high=1.5)


def _tied(x, z, y):
    # NOTE: equal values on purpose: round(y) holds many ties and z == 0 keeps them exact while the
    # gradient z gets (x * share) shows how an op splits it among tied maxima.
    return x * z + paddle.round(y)


CASES = [
    # ---- sum / mean ----
    OpCase("sum_all", lambda x: paddle.sum(x), [X], ["pd_op.sum"]),
    OpCase("sum_axis_keepdim", lambda x: paddle.sum(x, axis=1, keepdim=True), [X], ["pd_op.sum"]),
    OpCase("sum_axes_neg", lambda x: paddle.sum(x, axis=[0, -1]), [X], ["pd_op.sum"]),
    OpCase("sum_dtype_f64", lambda x: paddle.sum(x, axis=1, dtype="float64"), [X], ["pd_op.sum"]),
    OpCase("sum_int32_to_int64", lambda x: paddle.sum(x, axis=0), [Arg((3, 4), "int32")], ["pd_op.sum"]),
    OpCase("sum_int64_dtype_int32", lambda x: x.sum(dtype="int32"), [Arg((3, 4), "int64")], ["pd_op.sum"]),
    OpCase("sum_bool", lambda x: paddle.sum(x, axis=-1), [Arg((3, 4), "bool")], ["pd_op.sum"]),
    OpCase("sum_f64_0d", lambda x: paddle.sum(x), [Arg((), "float64")], ["pd_op.sum"]),
    OpCase(
        "sum_bf16",
        lambda x: paddle.sum(x, axis=1),
        [Arg((3, 40), "bfloat16")],
        ["pd_op.sum"],
        rtol=2e-2,
        atol=5e-2,
        reason="bfloat16 result rounding",
    ),
    OpCase(
        "sum_f16",
        lambda x: paddle.sum(x, axis=1),
        [Arg((3, 40), "float16")],
        ["pd_op.sum"],
        rtol=2e-3,
        atol=1e-2,
        reason="float16 result rounding",
    ),
    OpCase("mean_all", lambda x: paddle.mean(x), [X], ["pd_op.mean"]),
    OpCase("mean_axes_keepdim", lambda x: paddle.mean(x, axis=[0, 2], keepdim=True), [X], ["pd_op.mean"]),
    OpCase("mean_f64", lambda x: paddle.mean(x, axis=-1), [Arg((3, 4), "float64")], ["pd_op.mean"]),
    OpCase("mean_int32", lambda x: paddle.mean(x, axis=1), [Arg((3, 4), "int32", -9, 9)], ["pd_op.mean"]),
    OpCase("mean_all_op", lambda x: _C.mean_all(x), [X], ["pd_op.mean_all"]),
    # ---- max / min / amax / amin (tie conventions) ----
    OpCase("max_axis", lambda x: paddle.max(x, axis=1), [X], ["pd_op.max"]),
    OpCase("max_all_keepdim", lambda x: paddle.max(x, keepdim=True), [X], ["pd_op.max"]),
    OpCase("max_ties", lambda x, z, y: paddle.max(_tied(x, z, y), axis=-1), [X, Z, R], ["pd_op.max"]),
    OpCase("max_ties_all", lambda x, z: paddle.max(x * z), [X, Z], ["pd_op.max"]),
    OpCase("max_int64", lambda x: paddle.max(x, axis=0), [Arg((3, 4), "int64")], ["pd_op.max"]),
    OpCase("min_axes", lambda x: paddle.min(x, axis=[0, 2]), [X], ["pd_op.min"]),
    OpCase("min_ties", lambda x, z, y: paddle.min(_tied(x, z, y), axis=1), [X, Z, R], ["pd_op.min"]),
    OpCase("min_f64", lambda x: paddle.min(x), [Arg((3, 4), "float64")], ["pd_op.min"]),
    OpCase("amax", lambda x: paddle.amax(x, axis=1), [X], ["pd_op.amax"]),
    OpCase("amax_ties", lambda x, z, y: paddle.amax(_tied(x, z, y), axis=[0, 2]), [X, Z, R], ["pd_op.amax"]),
    OpCase(
        "amin_ties_keepdim",
        lambda x, z, y: paddle.amin(_tied(x, z, y), axis=-1, keepdim=True),
        [X, Z, R],
        ["pd_op.amin"],
    ),
    OpCase("amin_all", lambda x: paddle.amin(x), [X], ["pd_op.amin"]),
    # ---- prod / all / any / logsumexp ----
    OpCase("prod_axis", lambda x: paddle.prod(x, axis=1), [Arg((3, 4, 5), low=0.5, high=1.5)], ["pd_op.prod"]),
    OpCase("prod_all_f64", lambda x: paddle.prod(x), [Arg((3, 4), "float64", -1.5, 1.5)], ["pd_op.prod"]),
    OpCase("prod_int32", lambda x: paddle.prod(x, axis=0), [Arg((3, 4), "int32", -3, 3)], ["pd_op.prod"]),
    OpCase(
        "prod_keepdim_int64",
        lambda x: paddle.prod(x, axis=-1, keepdim=True),
        [Arg((3, 4), "int64", -3, 3)],
        ["pd_op.prod"],
    ),
    OpCase("all_axis", lambda x: paddle.all(x, axis=1), [Arg((3, 4), "bool")], ["pd_op.all"]),
    OpCase("all_full", lambda x: paddle.all(x), [Arg((3, 4), "bool")], ["pd_op.all"]),
    OpCase("any_keepdim", lambda x: paddle.any(x, axis=0, keepdim=True), [Arg((3, 4), "bool")], ["pd_op.any"]),
    OpCase("any_full", lambda x: paddle.any(x), [Arg((3, 4), "bool")], ["pd_op.any"]),
    OpCase("logsumexp", lambda x: paddle.logsumexp(x, axis=1), [X], ["pd_op.logsumexp"]),
    OpCase("logsumexp_all_keepdim", lambda x: paddle.logsumexp(x, keepdim=True), [X], ["pd_op.logsumexp"]),
    OpCase(
        "logsumexp_large_f64",
        lambda x: paddle.logsumexp(x * 400, axis=[0, 1]),
        [Arg((3, 4, 5), "float64")],
        ["pd_op.logsumexp"],
    ),
    # ---- argmax / argmin ----
    OpCase("argmax_axis", lambda x: paddle.argmax(x, axis=1), [X], ["pd_op.argmax"]),
    OpCase("argmax_flat", lambda x: paddle.argmax(x), [X], ["pd_op.argmax"]),
    OpCase("argmax_flat_keepdim", lambda x: paddle.argmax(x, keepdim=True), [X], ["pd_op.argmax"]),
    OpCase(
        "argmax_ties_int32",
        lambda x: paddle.argmax(paddle.round(x), axis=-1, keepdim=True, dtype="int32"),
        [R],
        ["pd_op.argmax"],
    ),
    OpCase("argmin_ties", lambda x: paddle.argmin(paddle.round(x), axis=0), [R], ["pd_op.argmin"]),
    OpCase("argmin_int64", lambda x: paddle.argmin(x, axis=1), [Arg((3, 4), "int64", 0, 3)], ["pd_op.argmin"]),
    # ---- norms ----
    OpCase("frobenius_norm", lambda x: paddle.norm(x, p="fro", axis=[0, 1]), [Arg((3, 4))], ["pd_op.frobenius_norm"]),
    OpCase(
        "frobenius_norm_3d_keepdim",
        lambda x: paddle.norm(x, p="fro", axis=[1, 2], keepdim=True),
        [X],
        ["pd_op.frobenius_norm"],
    ),
    OpCase(
        "frobenius_norm_reduce_all_f64",
        lambda x: _C.frobenius_norm(x, [0, 1], False, True),
        [Arg((3, 4), "float64")],
        ["pd_op.frobenius_norm"],
    ),
    OpCase("squared_l2_norm", lambda x: _C.squared_l2_norm(x), [X], ["pd_op.squared_l2_norm"]),
]

CASES += [
    OpCase("reduce_as", lambda x, t: paddle.reduce_as(x, t), [Arg((2, 3, 4)), Arg((3, 1))], ["pd_op.reduce_as"]),
    OpCase(
        "reduce_as_f64",
        lambda x, t: paddle.reduce_as(x, t),
        [Arg((2, 3, 4), "float64"), Arg((1, 3, 4), "float64")],
        ["pd_op.reduce_as"],
    ),
    OpCase("renorm", lambda x: paddle.renorm(x, 2.0, 1, 1.5), [Arg((3, 4, 5))], ["pd_op.renorm"]),
    OpCase("renorm_p1_f64", lambda x: paddle.renorm(x, 1.0, 0, 3.0), [Arg((3, 4), "float64")], ["pd_op.renorm"]),
    OpCase("clip_by_norm", lambda x: paddle.nn.clip.clip_by_norm(x, 1.0), [X], ["pd_op.clip_by_norm"]),
    OpCase("clip_by_norm_unclipped", lambda x: paddle.nn.clip.clip_by_norm(x, 100.0), [X], ["pd_op.clip_by_norm"]),
    # ---- composites of these ops: std, var, logaddexp, count_nonzero, normalize ----
    OpCase("std", lambda x: paddle.std(x, axis=1), [X], ["pd_op.mean", "pd_op.sum", "pd_op.sqrt"]),
    OpCase("var_biased", lambda x: paddle.var(x, axis=[0, 2], unbiased=False), [X], ["pd_op.mean", "pd_op.sum"]),
    OpCase("logaddexp", lambda x, y: paddle.logaddexp(x, y), [X, X], ["pd_op.log1p", "pd_op.maximum"]),
    OpCase("count_nonzero", lambda x: paddle.count_nonzero(paddle.round(x), axis=1), [R], ["pd_op.sum"]),
    OpCase(
        "normalize_composite",
        lambda x: paddle.nn.functional.normalize(x, axis=-1),
        [X],
        ["pd_op.maximum", "pd_op.divide"],
    ),
]

# Attributes no other case sets to a non-default value (test_attribute_coverage.py).
CASES += [
    OpCase("all_keepdim", lambda x: paddle.all(x, axis=1, keepdim=True), [Arg((3, 4), "bool")], ["pd_op.all"]),
    OpCase("amax_keepdim", lambda x: paddle.amax(x, axis=1, keepdim=True), [X], ["pd_op.amax"]),
    OpCase(
        "amax_ties_keepdim",
        lambda x, z, y: paddle.amax(_tied(x, z, y), axis=[0, 2], keepdim=True),
        [X, Z, R],
        ["pd_op.amax"],
    ),
    OpCase("min_keepdim", lambda x: paddle.min(x, axis=0, keepdim=True), [X], ["pd_op.min"]),
    OpCase("argmin_flat_keepdim_int32", lambda x: paddle.argmin(x, keepdim=True, dtype="int32"), [X], ["pd_op.argmin"]),
    OpCase("argmin_axis_keepdim", lambda x: paddle.argmin(x, axis=-1, keepdim=True), [X], ["pd_op.argmin"]),
]
