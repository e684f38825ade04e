"""Shape ops on the other dtypes Paddle's CPU kernels take (float16, bfloat16, float64, ints, bool)."""

import paddle
import paddle.nn.functional as F

from .harness import Arg, OpCase


def _dtype_cases(name, fn, shape, dtypes, ops, **kw):
    return [OpCase(f"{name}_{dt}", fn, [Arg(shape, dt)], ops, **kw) for dt in dtypes]


CASES = [
    *_dtype_cases(
        "transpose",
        lambda x: x.transpose([1, 0, 2]),
        (2, 3, 4),
        ["float16", "bfloat16", "bool", "int32"],
        ["pd_op.transpose"],
    ),
    *_dtype_cases("expand", lambda x: x.expand([2, 3, 4]), (3, 1), ["float64", "int64"], ["pd_op.expand"]),
    OpCase(
        "expand_float16",
        lambda x: x.expand([2, 3, 4]),
        [Arg((3, 1), "float16")],
        ["pd_op.expand"],
        grad_rtol=5e-3,
        grad_atol=5e-3,
        reason="float16 gradient sums round differently in Paddle and XLA",
    ),
    *_dtype_cases("tile", lambda x: paddle.tile(x, [2, 2]), (2, 3), ["float64", "int32"], ["pd_op.tile"]),
    *_dtype_cases("flip", lambda x: paddle.flip(x, [0]), (3, 4), ["float64", "bool"], ["pd_op.flip"]),
    *_dtype_cases("squeeze", lambda x: x.squeeze(1), (3, 1, 2), ["float16", "bfloat16", "int64"], ["pd_op.squeeze"]),
    *_dtype_cases("unsqueeze", lambda x: x.unsqueeze(0), (3, 2), ["float16", "bfloat16", "bool"], ["pd_op.unsqueeze"]),
    *_dtype_cases(
        "concat", lambda x: paddle.concat([x, x], 1), (2, 3), ["float16", "float64", "bool"], ["pd_op.concat"]
    ),
    *_dtype_cases("stack", lambda x: paddle.stack([x, x]), (2, 3), ["float16", "bfloat16", "int64"], ["pd_op.stack"]),
    *_dtype_cases(
        "split",
        lambda x: paddle.split(x, 2, 1),
        (2, 4),
        ["float16", "bfloat16", "int64", "bool"],
        ["pd_op.split_with_num"],
    ),
    *_dtype_cases(
        "strided", lambda x: x[::2, ::-1], (4, 3), ["float16", "bfloat16", "float64", "int64"], ["pd_op.strided_slice"]
    ),
    *_dtype_cases("slice", lambda x: x[1:, -2], (4, 3), ["float16", "float64", "int32"], ["pd_op.slice"]),
    *_dtype_cases("flatten", lambda x: x.flatten(), (2, 3), ["float16", "bfloat16", "bool"], ["pd_op.flatten"]),
    *_dtype_cases("roll", lambda x: paddle.roll(x, 1, 0), (3, 2), ["float64", "int64"], ["pd_op.roll"]),
    *_dtype_cases("tril", lambda x: paddle.tril(x), (3, 3), ["float16", "float64"], ["pd_op.tril"]),
    *_dtype_cases("pad3d", lambda x: F.pad(x, [1, 0, 1, 1], value=1.0), (1, 2, 3, 3), ["float64"], ["pd_op.pad3d"]),
]
