"""Constants and shapes: full, full_int_array, arange, assign_value, full_like, shape64, assign, ..."""

import numpy as np
import paddle

from .harness import Arg, OpCase

CASES = [
    OpCase(
        "full_scalar_mix",
        lambda x: x * 2.0 + paddle.full([3, 4], 0.5, "float32"),
        [Arg((3, 4))],
        ["pd_op.full", "pd_op.scale"],
    ),
    OpCase("full_int_array_reshape", lambda x: x.reshape([2, -1, 2]), [Arg((4, 6))], ["pd_op.full_int_array"]),
    OpCase("arange_float", lambda x: x + paddle.arange(0, 4, 1, dtype="float32"), [Arg((3, 4))], ["pd_op.arange"]),
    OpCase(
        "arange_from_shape",
        lambda x: paddle.arange(paddle.shape(x)[1], dtype="int64") + x.astype("int64"),
        [Arg((2, 5), "int64")],
        ["pd_op.arange", "pd_op.shape64"],
    ),
    OpCase(
        "assign_value_list", lambda x: x * paddle.to_tensor([1.0, -2.0, 3.0]), [Arg((2, 3))], ["pd_op.assign_value_"]
    ),
    OpCase(
        "assign_value_functional",
        lambda x: x + paddle.assign(np.array([[1.5], [2.5]], "float32")),
        [Arg((2, 3))],
        ["pd_op.assign_value_"],
    ),
    OpCase("full_like", lambda x: paddle.full_like(x, 3.0) * x, [Arg((2, 3))], ["pd_op.full_like"]),
    # NOTE: paddle.empty's values are whatever memory held; only its shape and a reduction of an empty one
    # are defined (PaddleSpeech's default argument paddle.empty([0])).
    OpCase(
        "empty", lambda x: x + paddle.empty([0]).sum() + paddle.empty([2, 3]).shape[0], [Arg((2, 3))], ["pd_op.empty"]
    ),
    OpCase("full_like_int", lambda x: paddle.full_like(x, 7), [Arg((2, 3), "int64")], ["pd_op.full_like"]),
    OpCase(
        "full_with_tensor",
        lambda x, v: paddle.full([2, 3], v) + x,
        [Arg((2, 3)), Arg((1,), grad=False)],
        ["pd_op.full_with_tensor"],
    ),
    OpCase("shape64", lambda x: paddle.shape(x).astype("float32").sum() * x, [Arg((2, 3))], ["pd_op.shape64"]),
    OpCase("shape_int32", lambda x: paddle._C_ops.shape(x), [Arg((2, 3))], ["pd_op.shape"], grad=False),
    OpCase("assign", lambda x: paddle.assign(x) * 2.0, [Arg((2, 3))], ["pd_op.assign"]),
    # NOTE: the detached factor carries no gradient: d/dx (x * detach(x)) is detach(x), not 2x
    OpCase("detach", lambda x: x * x.detach() + x.sum().detach(), [Arg((2, 3))], ["pd_op.share_data_"]),
    OpCase("share_data", lambda x: x * paddle._C_ops.share_data(x), [Arg((2, 3))], ["pd_op.share_data"]),
    OpCase(
        "assign_out",
        lambda x, y: paddle.assign(x, output=y) + y,
        [Arg((2, 3)), Arg((2, 3), grad=False)],
        ["pd_op.assign_out_"],
        grad=False,
    ),
]
