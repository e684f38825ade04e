import paddle
import paddle.nn.functional as F

from .harness import Arg, OpCase

X = Arg((3, 4, 5), low=-8.0, high=8.0)
ZERO = Arg((3, 4, 5), low=0.0, high=0.0)

# (case name, op, paddle call)
_ACTS = [
    ("relu", "relu", F.relu),
    ("relu6", "relu6", F.relu6),
    ("gelu", "gelu", F.gelu),
    ("gelu_tanh", "gelu", lambda x: F.gelu(x, approximate=True)),
    ("silu", "silu", F.silu),
    ("swish", "swish", F.swish),
    ("sigmoid", "sigmoid", F.sigmoid),
    ("logsigmoid", "logsigmoid", F.log_sigmoid),
    ("hardswish", "hardswish", F.hardswish),
    ("hardsigmoid", "hardsigmoid", F.hardsigmoid),
    ("hardsigmoid_args", "hardsigmoid", lambda x: F.hardsigmoid(x, slope=0.2, offset=0.3)),
    ("hardtanh", "hardtanh", F.hardtanh),
    ("hardtanh_args", "hardtanh", lambda x: F.hardtanh(x, -2.0, 3.0)),
    ("leaky_relu", "leaky_relu", F.leaky_relu),
    ("leaky_relu_slope", "leaky_relu", lambda x: F.leaky_relu(x, 0.3)),
    ("elu", "elu", F.elu),
    ("elu_alpha", "elu", lambda x: F.elu(x, 0.4)),
    ("selu", "selu", F.selu),
    ("celu", "celu", F.celu),
    ("celu_alpha", "celu", lambda x: F.celu(x, 2.5)),
    ("softplus", "softplus", F.softplus),
    ("softplus_beta_threshold", "softplus", lambda x: F.softplus(x, 2.0, 6.0)),
    ("softsign", "softsign", F.softsign),
    ("softshrink", "softshrink", lambda x: F.softshrink(x, 0.7)),
    ("hardshrink", "hardshrink", F.hardshrink),
    ("tanh_shrink", "tanh_shrink", F.tanhshrink),
    ("mish", "mish", F.mish),
    ("thresholded_relu", "thresholded_relu", F.thresholded_relu),
    ("thresholded_relu_value", "thresholded_relu", lambda x: F.thresholded_relu(x, 0.5, -1.0)),
    ("stanh", "stanh", lambda x: paddle.stanh(x, 0.5, 2.0)),
]

# Inputs sitting exactly on each kink, to check Paddle's gradient convention there: (op, call, point).
_KINKS = [
    ("relu", F.relu, 0.0),
    ("relu6", F.relu6, 0.0),
    ("relu6", F.relu6, 6.0),
    ("hardtanh", F.hardtanh, -1.0),
    ("hardtanh", F.hardtanh, 1.0),
    ("leaky_relu", F.leaky_relu, 0.0),
    ("elu", F.elu, 0.0),
    ("hardshrink", F.hardshrink, 0.5),
    ("hardshrink", F.hardshrink, -0.5),
    ("softshrink", F.softshrink, 0.5),
    ("thresholded_relu", F.thresholded_relu, 1.0),
    ("hardswish", F.hardswish, -3.0),
    ("hardswish", F.hardswish, 3.0),
    ("hardsigmoid", F.hardsigmoid, -3.0),
    ("hardsigmoid", F.hardsigmoid, 3.0),
    ("celu", F.celu, 0.0),
    ("selu", F.selu, 0.0),
]


CASES = [
    *[OpCase(n, lambda x, f=f: f(x), [X], [f"pd_op.{op}"]) for n, op, f in _ACTS],
    *[
        OpCase(f"{n}_f64", lambda x, f=f: f(x), [Arg(X.shape, "float64", -8.0, 8.0)], [f"pd_op.{op}"])
        for n, op, f in _ACTS
    ],
    *[
        OpCase(f"{op}_kink_at_{at:g}", lambda x, z, f=f, at=at: f(x * z + at), [X, ZERO], [f"pd_op.{op}"])
        for op, f, at in _KINKS
    ],
    OpCase("softplus_large", lambda x: F.softplus(x * 20), [X], ["pd_op.softplus"]),
    OpCase("elu_large", lambda x: F.elu(x * 20), [X], ["pd_op.elu"]),
    # NOTE: Paddle's CPU activation kernels take no float16/bfloat16, so there is nothing to compare.
    OpCase("softplus_at_threshold", lambda x, z: F.softplus(x * z + 20.0), [X, ZERO], ["pd_op.softplus"]),
    OpCase("mish_at_threshold", lambda x, z: F.mish(x * z + 20.0), [X, ZERO], ["pd_op.mish"]),
    # ---- prelu (all / channel / element), maxout, glu, rrelu ----
    OpCase("prelu_all", lambda x, a: F.prelu(x, a), [X, Arg((1,), low=0.1, high=0.5)], ["pd_op.prelu"]),
    OpCase("prelu_channel_nchw", lambda x, a: F.prelu(x, a), [Arg((2, 3, 4, 5)), Arg((3,))], ["pd_op.prelu"]),
    OpCase(
        "prelu_channel_nhwc",
        lambda x, a: F.prelu(x, a, data_format="NHWC"),
        [Arg((2, 3, 4, 5)), Arg((5,))],
        ["pd_op.prelu"],
    ),
    OpCase(
        "prelu_element",
        lambda x, a: paddle._C_ops.prelu(x, a, "NCHW", "element"),
        [Arg((2, 3, 4)), Arg((1, 3, 4))],
        ["pd_op.prelu"],
    ),
    OpCase(
        "prelu_f64_3d_channel",
        lambda x, a: F.prelu(x, a),
        [Arg((2, 3, 4), "float64"), Arg((3,), "float64")],
        ["pd_op.prelu"],
    ),
    OpCase("maxout", lambda x: F.maxout(x, 2), [Arg((2, 6, 3, 3))], ["pd_op.maxout"]),
    OpCase("maxout_nhwc", lambda x: F.maxout(x, 3, axis=-1), [Arg((2, 3, 3, 6))], ["pd_op.maxout"]),
    OpCase(
        "maxout_ties",
        lambda x, z: F.maxout(x * z, 2),
        [Arg((2, 4, 3, 3)), Arg((2, 4, 3, 3), low=0.0, high=0.0)],
        ["pd_op.maxout"],
    ),
    OpCase("glu", lambda x: F.glu(x, axis=-1), [Arg((3, 4, 6))], ["pd_op.sigmoid", "pd_op.multiply"]),
    OpCase("rrelu_eval", lambda x: F.rrelu(x, training=False), [X], ["pd_op.rrelu"]),
]

CASES += [
    OpCase("swiglu", lambda x, y: F.swiglu(x, y), [Arg((3, 4)), Arg((3, 4))], ["pd_op.swiglu"]),
    OpCase("swiglu_packed_f64", lambda x: F.swiglu(x), [Arg((3, 8), "float64")], ["pd_op.swiglu"]),
]

# Attributes no other case sets to a non-default value (test_attribute_coverage.py).
CASES += [
    OpCase("mish_lambda_5", lambda x: paddle._C_ops.mish(x, 5.0), [X], ["pd_op.mish"]),
]
