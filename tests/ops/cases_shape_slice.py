"""Basic indexing: x[...] reads (slice, strided_slice) and x[...] = v writes (set_value*)."""

import paddle

from .harness import Arg, OpCase

X = Arg((4, 5, 6))


def _setitem(index, value=None):
    """x[index] = value (or = the second input) on a copy: an in-place write on a non-leaf tensor."""

    def fn(x, *v):
        y = x.clone()
        y[index] = v[0] if v else value
        return y

    return fn


def _shape_slice(x):
    # NOTE: a slice of a shape: the result must stay a constant for the reshape under jit.
    return paddle.reshape(x, paddle.shape(x)[-2:])


CASES = [
    # slice
    OpCase("slice_basic", lambda x: x[1:3], [X], ["pd_op.slice"]),
    OpCase("slice_int_index", lambda x: x[1, :, -1], [X], ["pd_op.slice"]),
    OpCase("slice_to_0d", lambda x: x[1, 2, 3], [X], ["pd_op.slice"]),
    OpCase("slice_neg", lambda x: x[:, -3:-1], [Arg((4, 5), "int64")], ["pd_op.slice"]),
    OpCase("slice_out_of_range", lambda x: x[2:100, -100:2], [Arg((4, 5))], ["pd_op.slice"]),
    OpCase("slice_empty", lambda x: x[3:1], [Arg((4, 5))], ["pd_op.slice"]),
    OpCase("slice_ellipsis_none", lambda x: x[None, ..., 1], [X], ["pd_op.slice", "pd_op.unsqueeze"]),
    OpCase("slice_api", lambda x: paddle.slice(x, [0, 2], [-3, 1], [100, -1]), [X], ["pd_op.slice"]),
    OpCase("slice_bool", lambda x: x[1:, :2], [Arg((3, 4), "bool")], ["pd_op.slice"]),
    OpCase("slice_bf16", lambda x: x[:, 1:3], [Arg((3, 4), "bfloat16")], ["pd_op.slice"]),
    OpCase("slice_of_shape", _shape_slice, [Arg((1, 3, 4))], ["pd_op.slice", "pd_op.shape64"]),
    # a position computed from the inputs: x[i] with a 0-D tensor i (decoding loops, KV caches)
    OpCase("slice_tensor_index", lambda x, i: x[i], [X, Arg((), "int64", -4, 4)], ["pd_op.slice"]),
    OpCase("slice_tensor_index_mixed", lambda x, i: x[1, :, i], [X, Arg((), "int64", 0, 6)], ["pd_op.slice"]),
    OpCase(
        "setitem_tensor_index",
        lambda x, v, i: _setitem((slice(None), i))(x, v),
        [X, Arg((4, 6)), Arg((), "int64", -5, 5)],
        ["pd_op.set_value_with_tensor_"],
    ),
    # strided_slice
    OpCase("strided_step", lambda x: x[1:4, ::2], [X], ["pd_op.strided_slice"]),
    OpCase("strided_reverse", lambda x: x[::-1], [X], ["pd_op.strided_slice"]),
    OpCase("strided_neg_step", lambda x: x[3:0:-2, 10:-10:-1], [X], ["pd_op.strided_slice"]),
    OpCase("strided_int", lambda x: x[:, ::-3], [Arg((3, 7), "int32")], ["pd_op.strided_slice"]),
    OpCase(
        "strided_api",
        lambda x: paddle.strided_slice(x, [0, 2], [-1, 5], [-5, -10], [-2, -2]),
        [X],
        ["pd_op.strided_slice"],
    ),
    OpCase("crop", lambda x: paddle.crop(x, [2, -1, 3], [1, 2, 2]), [X], ["pd_op.crop"]),
    # set_value_with_tensor: gradients reach both the written tensor and the value
    OpCase("setitem_tensor", _setitem(slice(1, 3)), [X, Arg((2, 5, 6))], ["pd_op.set_value_with_tensor_"]),
    OpCase("setitem_broadcast", _setitem((slice(None), 1)), [X, Arg((6,))], ["pd_op.set_value_with_tensor_"]),
    OpCase(
        "setitem_step",
        _setitem((slice(None), slice(None, None, 2))),
        [X, Arg((4, 3, 1))],
        ["pd_op.set_value_with_tensor_"],
    ),
    OpCase("setitem_neg_step", _setitem(slice(None, None, -2)), [X, Arg((2, 5, 6))], ["pd_op.set_value_with_tensor_"]),
    OpCase("setitem_neg_step_end", _setitem(slice(3, -1, -1)), [X, Arg((6,))], ["pd_op.set_value_with_tensor_"]),
    OpCase(
        "setitem_none",
        _setitem((Ellipsis, None, slice(1, None))),
        [Arg((3, 4)), Arg((1, 3))],
        ["pd_op.set_value_with_tensor_"],
    ),
    OpCase(
        "setitem_int64",
        _setitem((1, slice(0, 2))),
        [Arg((3, 4), "int64"), Arg((2,), "int64")],
        ["pd_op.set_value_with_tensor_"],
    ),
    OpCase(
        "select_scatter",
        lambda x, v: paddle.select_scatter(x, v, 0, 1),
        [Arg((3, 4)), Arg((4,))],
        ["pd_op.set_value_with_tensor"],
    ),
    OpCase(
        "slice_scatter",
        lambda x, v: paddle.slice_scatter(x, v, [1], [0], [4], [2]),
        [Arg((3, 4)), Arg((3, 2))],
        ["pd_op.set_value_with_tensor"],
    ),
    # set_value: constant values
    OpCase("setitem_scalar", _setitem((0, 1), 3.0), [Arg((3, 4))], ["pd_op.set_value_"]),
    OpCase("setitem_scalar_slice", _setitem((Ellipsis, None, slice(1, None)), 2), [X], ["pd_op.set_value_"]),
    OpCase("setitem_scalar_int", _setitem(slice(-2, None), 7), [Arg((3, 4), "int64")], ["pd_op.set_value_"]),
    OpCase("setitem_scalar_bool", _setitem(1, True), [Arg((3, 4), "bool")], ["pd_op.set_value_"]),
    OpCase(
        "set_value_op",
        lambda x: paddle._C_ops.set_value(x, [1], [3], [1], [0], [], [], [1], [5.0]),
        [Arg((4, 3))],
        ["pd_op.set_value"],
    ),
]
