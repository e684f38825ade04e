"""Reshape, permute, broadcast, join and split. Slicing: cases_shape_slice.py; pads and matrices:
cases_shape_pad.py."""

import paddle

from .harness import Arg, OpCase

X = Arg((2, 3, 4))


def _shape_arith(x):
    # NOTE: shape64 -> slice -> stack -> reshape: the target shape must stay a constant under jit.
    s = paddle.shape(x)
    return paddle.reshape(x, [s[2], s[0] * s[1]])


CASES = [
    # reshape
    OpCase("reshape_zero_neg", lambda x: paddle.reshape(x, [0, -1]), [X], ["pd_op.reshape"]),
    # a zero-size input: Paddle reads 0 as a literal 0 and infers -1 from the nonzero dimensions
    OpCase("reshape_zero_size", lambda x: paddle.reshape(x, [0, -1]), [Arg((1, 0, 2, 2))], ["pd_op.reshape"]),
    OpCase("reshape_zero_size_neg_first", lambda x: paddle.reshape(x, [-1, 0, 3]), [Arg((2, 0, 3))], ["pd_op.reshape"]),
    OpCase("reshape_zero_size_no_zero", lambda x: paddle.reshape(x, [2, -1]), [Arg((1, 0, 2, 2))], ["pd_op.reshape"]),
    OpCase("reshape_int64", lambda x: x.reshape([4, 6]), [Arg((2, 3, 4), "int64")], ["pd_op.reshape"]),
    OpCase("reshape_bool", lambda x: x.reshape([-1]), [Arg((2, 3), "bool")], ["pd_op.reshape"]),
    OpCase("reshape_f16", lambda x: x.reshape([3, 8]), [Arg((2, 3, 4), "float16")], ["pd_op.reshape"]),
    OpCase("reshape_bf16", lambda x: x.reshape([3, 8]), [Arg((2, 3, 4), "bfloat16")], ["pd_op.reshape"]),
    OpCase("reshape_shape_arith", _shape_arith, [X], ["pd_op.reshape", "pd_op.shape64", "pd_op.slice"]),
    # NOTE: to_static turns Tensor.reshape_() into reshape; _C_ops keeps the in-place op, as saved
    # inference programs and static Programs do.
    OpCase("reshape_inplace", lambda x: paddle._C_ops.reshape_(x.clone(), [6, 4]), [X], ["pd_op.reshape_"]),
    # transpose
    OpCase("transpose", lambda x: paddle.transpose(x, [2, 0, 1]), [X], ["pd_op.transpose"]),
    OpCase("transpose_inplace", lambda x: paddle._C_ops.transpose_(x.clone(), [1, 2, 0]), [X], ["pd_op.transpose_"]),
    OpCase("transpose_f64", lambda x: x.transpose([1, 0]), [Arg((3, 5), "float64")], ["pd_op.transpose"]),
    OpCase("transpose_T", lambda x: x.T, [X], ["pd_op.transpose"]),
    OpCase("transpose_mT", lambda x: x.mT, [X], ["pd_op.transpose"]),
    OpCase("transpose_moveaxis", lambda x: paddle.moveaxis(x, 0, -1), [Arg((2, 3, 4), "int32")], ["pd_op.transpose"]),
    # squeeze / unsqueeze / flatten
    OpCase("squeeze_axis", lambda x: paddle.squeeze(x, 1), [Arg((3, 1, 4))], ["pd_op.squeeze"]),
    OpCase("squeeze_all", lambda x: paddle.squeeze(x), [Arg((1, 3, 1, 4))], ["pd_op.squeeze"]),
    OpCase("squeeze_not_one", lambda x: paddle.squeeze(x, [0, 1]), [Arg((1, 3, 4))], ["pd_op.squeeze"]),
    OpCase("squeeze_neg", lambda x: paddle.squeeze(x, -1), [Arg((3, 4, 1), "int64")], ["pd_op.squeeze"]),
    OpCase("squeeze_inplace", lambda x: paddle._C_ops.squeeze_(x.clone(), [0]), [Arg((1, 3))], ["pd_op.squeeze_"]),
    OpCase(
        "unsqueeze_inplace", lambda x: paddle._C_ops.unsqueeze_(x.clone(), [1]), [Arg((2, 3))], ["pd_op.unsqueeze_"]
    ),
    OpCase("unsqueeze_multi", lambda x: paddle.unsqueeze(x, [0, 2]), [X], ["pd_op.unsqueeze"]),
    OpCase("unsqueeze_neg", lambda x: paddle.unsqueeze(x, [-1, -3]), [X], ["pd_op.unsqueeze"]),
    OpCase("unsqueeze_none_index", lambda x: x[None, :, None], [Arg((3, 4), "bool")], ["pd_op.unsqueeze"]),
    OpCase("flatten_mid", lambda x: paddle.flatten(x, 1, 2), [Arg((2, 3, 4, 5))], ["pd_op.flatten"]),
    OpCase("flatten_all", lambda x: paddle.flatten(x), [Arg((2, 3, 4), "int64")], ["pd_op.flatten"]),
    OpCase("flatten_neg", lambda x: paddle.flatten(x, -2, -1), [X], ["pd_op.flatten"]),
    OpCase("flatten_0d", lambda x: paddle.flatten(x), [Arg(())], ["pd_op.flatten"]),
    OpCase("flatten_inplace", lambda x: paddle._C_ops.flatten_(x.clone(), 0, 1), [X], ["pd_op.flatten_"]),
    OpCase("numel", lambda x: x.numel(), [X], ["pd_op.numel"]),
    OpCase("numel_size", lambda x: x.size + x.numel(), [Arg((3, 5), "int32")], ["pd_op.numel"]),
    # broadcast
    OpCase("expand", lambda x: paddle.expand(x, [2, 3, 4]), [Arg((3, 1))], ["pd_op.expand"]),
    OpCase("expand_keep", lambda x: paddle.expand(x, [5, -1, 4]), [Arg((3, 1), "int64")], ["pd_op.expand"]),
    OpCase("broadcast_to", lambda x: paddle.broadcast_to(x, [2, 3, 4]), [Arg((4,))], ["pd_op.expand"]),
    OpCase(
        "expand_as", lambda x, y: paddle.expand_as(x, y), [Arg((1, 4)), Arg((3, 4), grad=False)], ["pd_op.expand_as"]
    ),
    OpCase(
        "broadcast_tensors",
        lambda x, y: paddle.broadcast_tensors([x, y]),
        [Arg((3, 1)), Arg((1, 4))],
        ["pd_op.broadcast_tensors"],
    ),
    OpCase("tile", lambda x: paddle.tile(x, [2, 1, 3]), [Arg((3, 4))], ["pd_op.tile"]),
    OpCase("tile_short", lambda x: paddle.tile(x, [2]), [Arg((2, 3), "int64")], ["pd_op.tile"]),
    OpCase("meshgrid", lambda x, y: paddle.meshgrid(x, y), [Arg((3,)), Arg((4,))], ["pd_op.meshgrid"]),
    # join / split
    OpCase("concat", lambda x, y: paddle.concat([x, y, x], axis=1), [Arg((2, 3)), Arg((2, 4))], ["pd_op.concat"]),
    OpCase(
        "concat_neg_axis",
        lambda x, y: paddle.concat([x, y], axis=-1),
        [Arg((2, 3), "int64"), Arg((2, 2), "int64")],
        ["pd_op.concat"],
    ),
    OpCase(
        "concat_bf16",
        lambda x, y: paddle.concat([x, y]),
        [Arg((2, 3), "bfloat16"), Arg((1, 3), "bfloat16")],
        ["pd_op.concat"],
        grad=False,
        reason="Paddle's CPU concat has no bfloat16 gradient kernel",
    ),
    OpCase("stack", lambda x, y: paddle.stack([x, y], axis=1), [Arg((2, 3)), Arg((2, 3))], ["pd_op.stack"]),
    OpCase(
        "stack_neg",
        lambda x, y: paddle.stack([x, y], axis=-1),
        [Arg((2, 3), "bool"), Arg((2, 3), "bool")],
        ["pd_op.stack"],
    ),
    OpCase("split_sections", lambda x: paddle.split(x, [1, -1, 1], axis=2), [Arg((2, 3, 5))], ["pd_op.split"]),
    OpCase("split_num", lambda x: paddle.split(x, 2, axis=-1), [Arg((2, 3, 4))], ["pd_op.split_with_num"]),
    OpCase("chunk", lambda x: paddle.chunk(x, 3, axis=1), [Arg((2, 6), "int64")], ["pd_op.split_with_num"]),
    OpCase("tensor_split", lambda x: paddle.tensor_split(x, 3, axis=1), [Arg((2, 6))], ["pd_op.split"]),
    OpCase("unbind", lambda x: paddle.unbind(x, axis=1), [X], ["pd_op.unbind"]),
    OpCase("unstack", lambda x: paddle.unstack(x, axis=-1), [X], ["pd_op.unstack"]),
    # reorder
    OpCase("flip", lambda x: paddle.flip(x, [0, 2]), [X], ["pd_op.flip"]),
    OpCase("flip_int", lambda x: paddle.flip(x, -1), [Arg((3, 4), "int32")], ["pd_op.flip"]),
    OpCase("reverse", lambda x: paddle._C_ops.reverse(x, [0, -1]), [X], ["pd_op.reverse"]),
    OpCase("rot90", lambda x: paddle.rot90(x), [Arg((3, 4))], ["pd_op.flip", "pd_op.transpose"]),
    OpCase("roll_axis", lambda x: paddle.roll(x, [1, -2], [0, 2]), [X], ["pd_op.roll"]),
    OpCase("roll_flat", lambda x: paddle.roll(x, 5), [X], ["pd_op.roll"]),
    OpCase("repeat_interleave", lambda x: paddle.repeat_interleave(x, 2, 1), [X], ["pd_op.repeat_interleave"]),
    OpCase(
        "repeat_interleave_flat",
        lambda x: paddle.repeat_interleave(x, 3),
        [Arg((2, 3), "int64")],
        ["pd_op.repeat_interleave"],
    ),
    OpCase(
        "repeat_interleave_tensor",
        lambda x: paddle.repeat_interleave(x, paddle.to_tensor([1, 0, 3]), 1),
        [Arg((2, 3))],
        ["pd_op.repeat_interleave_with_tensor_index"],
    ),
]

# Attributes no other case sets to a non-default value (test_attribute_coverage.py).
CASES += [
    OpCase(
        "repeat_interleave_output_size",
        lambda x: paddle.repeat_interleave(x, 2, 1, output_size=6),
        [X],
        ["pd_op.repeat_interleave"],
    ),
    OpCase(
        "repeat_interleave_tensor_output_size",
        lambda x: paddle.repeat_interleave(x, paddle.to_tensor([1, 0, 3]), 1, output_size=4),
        [Arg((2, 3))],
        ["pd_op.repeat_interleave_with_tensor_index"],
    ),
]
