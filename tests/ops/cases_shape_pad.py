"""Padding, triangles, diagonals and evenly spaced ranges."""

import paddle
import paddle.nn.functional as F

from .harness import Arg, OpCase

IMG = Arg((2, 3, 4, 5))


def _pad(pad, **kw):
    return lambda x: F.pad(x, pad, **kw)


CASES = [
    # pd_op.pad: a pad for every dimension
    OpCase("pad_all_dims", _pad([0, 0, 1, 2, 2, 0, 1, 1], value=2.5), [IMG], ["pd_op.pad"]),
    OpCase("pad_all_dims_int", _pad([1, 0, 0, 2], value=3), [Arg((2, 3), "int64")], ["pd_op.pad"]),
    # pd_op.pad3d
    OpCase("pad3d_constant", _pad([1, 2, 0, 1], value=-1.0), [IMG], ["pd_op.pad3d"]),
    OpCase("pad3d_reflect", _pad([1, 2, 2, 1], mode="reflect"), [IMG], ["pd_op.pad3d"]),
    OpCase("pad3d_replicate", _pad([3, 0, 1, 2], mode="replicate"), [IMG], ["pd_op.pad3d"]),
    OpCase("pad3d_circular", _pad([2, 1, 1, 3], mode="circular"), [IMG], ["pd_op.pad3d"]),
    OpCase("pad3d_nhwc", _pad([1, 2, 0, 1], mode="reflect", data_format="NHWC"), [IMG], ["pd_op.pad3d"]),
    OpCase("pad3d_5d", _pad([1, 0, 0, 2, 1, 1], mode="replicate"), [Arg((1, 2, 3, 4, 5))], ["pd_op.pad3d"]),
    OpCase(
        "pad3d_ndhwc", _pad([1, 0, 0, 2, 1, 1], value=0.5, data_format="NDHWC"), [Arg((1, 2, 3, 4, 5))], ["pd_op.pad3d"]
    ),
    OpCase("pad3d_ncl", _pad([2, 1], mode="circular", data_format="NCL"), [Arg((2, 3, 5))], ["pd_op.pad3d"]),
    OpCase("pad3d_nlc", _pad([2, 1], mode="reflect", data_format="NLC"), [Arg((2, 5, 3))], ["pd_op.pad3d"]),
    OpCase(
        "pad3d_tensor_pad", lambda x: F.pad(x, paddle.full([4], 1, "int32"), mode="reflect"), [IMG], ["pd_op.pad3d"]
    ),
    OpCase("pad3d_f64", _pad([1, 1, 1, 1], mode="replicate"), [Arg((1, 2, 3, 4), "float64")], ["pd_op.pad3d"]),
    # triangles
    OpCase("tril", lambda x: paddle.tril(x, 1), [Arg((4, 5))], ["pd_op.tril"]),
    OpCase("tril_batched_int", lambda x: paddle.tril(x, -1), [Arg((2, 4, 3), "int64")], ["pd_op.tril"]),
    OpCase("triu", lambda x: paddle.triu(x, -1), [Arg((2, 4, 5))], ["pd_op.triu"]),
    OpCase("triu_bool", lambda x: paddle.triu(x), [Arg((4, 4), "bool")], ["pd_op.triu"]),
    OpCase("tril_inplace", lambda x: paddle._C_ops.tril_(x.clone(), 0), [Arg((3, 4))], ["pd_op.tril_"]),
    OpCase("triu_inplace", lambda x: paddle._C_ops.triu_(x.clone(), 1), [Arg((3, 4))], ["pd_op.triu_"]),
    OpCase("tril_indices", lambda x: paddle.tril_indices(4, 5, 1) + x, [Arg((1,), "int64")], ["pd_op.tril_indices"]),
    OpCase("triu_indices", lambda x: paddle.triu_indices(4, 3, -1) + x, [Arg((1,), "int64")], ["pd_op.triu_indices"]),
    # diagonals
    OpCase("diag_vector", lambda x: paddle.diag(x, 1, padding_value=2.0), [Arg((4,))], ["pd_op.diag"]),
    OpCase("diag_vector_neg", lambda x: paddle.diag(x, -2), [Arg((3,), "int64")], ["pd_op.diag"]),
    OpCase("diag_matrix", lambda x: paddle.diag(x, -1), [Arg((4, 5))], ["pd_op.diag"]),
    OpCase("diagonal", lambda x: paddle.diagonal(x, 1, 0, 2), [Arg((3, 2, 4))], ["pd_op.diagonal"]),
    OpCase("diagonal_neg", lambda x: paddle.diagonal(x, -1, -1, -2), [Arg((2, 4, 3))], ["pd_op.diagonal"]),
    OpCase(
        "diag_embed",
        lambda x: paddle.diag_embed(x, 1, 0, 2),
        [Arg((2, 3))],
        ["pd_op.diag_embed"],
        grad=False,
        reason="Paddle's diag_embed is forward-only",
    ),
    OpCase("diag_embed_neg", lambda x: paddle.diag_embed(x, -1), [Arg((2, 3), "int64")], ["pd_op.diag_embed"]),
    OpCase(
        "diagonal_scatter",
        lambda x, y: paddle.diagonal_scatter(x, y, 1),
        [Arg((3, 4)), Arg((3,))],
        ["pd_op.fill_diagonal_tensor"],
    ),
    OpCase(
        "fill_diagonal_tensor_inplace",
        lambda x, y: paddle._C_ops.fill_diagonal_tensor_(x.clone(), y, -1, 0, 2),
        [Arg((4, 2, 3)), Arg((2, 3))],
        ["pd_op.fill_diagonal_tensor_"],
    ),
    OpCase(
        "fill_diagonal", lambda x: paddle._C_ops.fill_diagonal(x, 2.0, 1, False), [Arg((5, 3))], ["pd_op.fill_diagonal"]
    ),
    OpCase(
        "fill_diagonal_wrap",
        lambda x: paddle._C_ops.fill_diagonal_(x.clone(), -1.0, 0, True),
        [Arg((7, 3))],
        ["pd_op.fill_diagonal_"],
    ),
    OpCase(
        "fill_diagonal_3d",
        lambda x: paddle._C_ops.fill_diagonal(x, 4.0, 0, False),
        [Arg((3, 3, 3))],
        ["pd_op.fill_diagonal"],
    ),
    # constants
    OpCase("eye", lambda x: paddle.eye(3, 4) + x, [Arg((3, 4))], ["pd_op.eye"]),
    OpCase("eye_square_int", lambda x: paddle.eye(3, dtype="int64") + x, [Arg((3, 3), "int64")], ["pd_op.eye"]),
    OpCase("linspace", lambda x: paddle.linspace(-1.5, 2.25, 7) + x, [Arg((7,))], ["pd_op.linspace"]),
    OpCase(
        "linspace_int", lambda x: paddle.linspace(0, 10, 4, dtype="int64") + x, [Arg((4,), "int64")], ["pd_op.linspace"]
    ),
    OpCase(
        "linspace_f64_one",
        lambda x: paddle.linspace(0.3, 2.0, 1, dtype="float64") + x,
        [Arg((1,), "float64")],
        ["pd_op.linspace"],
    ),
    OpCase(
        "linspace_tensor_ends",
        lambda a, b: paddle.linspace(a, b, 5),
        [Arg(()), Arg(())],
        ["pd_op.linspace"],
        grad=False,
        reason="Paddle's linspace has no gradient",
    ),
    OpCase("logspace", lambda x: paddle.logspace(0, 2, 5, 2.0) + x, [Arg((5,))], ["pd_op.logspace"]),
]

# Attributes no other case sets to a non-default value (test_attribute_coverage.py).
CASES += [
    OpCase(
        "fill_diagonal_tensor_dims_1_2",
        lambda x, y: paddle._C_ops.fill_diagonal_tensor(x, y, 0, 1, 2),
        [Arg((2, 4, 3)), Arg((2, 3))],
        ["pd_op.fill_diagonal_tensor"],
    ),
    OpCase(
        "fill_diagonal_tensor_inplace_dims_1_2",
        lambda x, y: paddle._C_ops.fill_diagonal_tensor_(x.clone(), y, 1, 1, 2),
        [Arg((2, 4, 3)), Arg((2, 2))],
        ["pd_op.fill_diagonal_tensor_"],
    ),
]
