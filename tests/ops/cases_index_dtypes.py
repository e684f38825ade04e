"""Index ops on the other dtypes Paddle's CPU kernels take (float16, bfloat16, float64, ints, bool)."""

import paddle

from .harness import Arg, OpCase

IDX = Arg((3,), "int64", 0, 4)


def _dtype_cases(name, fn, args, dtypes, ops, **kw):
    """One case per dtype; `args` is a function of the dtype giving the inputs."""
    return [OpCase(f"{name}_{dt}", fn, args(dt), ops, **kw) for dt in dtypes]


CASES = [
    *_dtype_cases(
        "gather",
        lambda x, i: paddle.gather(x, i),
        lambda dt: [Arg((4, 3), dt), IDX],
        ["bfloat16", "float64", "int32", "bool"],
        ["pd_op.gather"],
    ),
    *_dtype_cases(
        "gather_nd",
        lambda x, i: paddle.gather_nd(x, i),
        lambda dt: [Arg((4, 3), dt), Arg((2, 2), "int64", 0, 3)],
        ["float64", "int64", "bool"],
        ["pd_op.gather_nd"],
    ),
    *_dtype_cases(
        "index_select",
        lambda x, i: paddle.index_select(x, i, 1),
        lambda dt: [Arg((3, 4), dt), IDX],
        ["bfloat16", "int64"],
        ["pd_op.index_select"],
    ),
    *_dtype_cases(
        "scatter",
        lambda x, u: paddle.scatter(x, paddle.to_tensor([2, 0]), u),
        lambda dt: [Arg((4, 3), dt), Arg((2, 3), dt)],
        ["float64", "int32"],
        ["pd_op.scatter"],
    ),
    *_dtype_cases(
        "take_along_axis",
        lambda x, i: paddle.take_along_axis(x, i, 1),
        lambda dt: [Arg((3, 4), dt), Arg((3, 2), "int64", 0, 4)],
        ["float64", "int64"],
        ["pd_op.take_along_axis"],
    ),
    *_dtype_cases(
        "put_along_axis",
        lambda x, i, v: paddle.put_along_axis(x, i, v, 1, "add"),
        lambda dt: [Arg((3, 4), dt), Arg((3, 2), "int64", 0, 4), Arg((3, 2), dt)],
        ["float64", "int32"],
        ["pd_op.put_along_axis"],
    ),
    *_dtype_cases(
        "where",
        lambda c, x, y: paddle.where(c, x, y),
        lambda dt: [Arg((3, 4), "bool"), Arg((3, 4), dt), Arg((3, 4), dt)],
        ["float64", "int32"],
        ["pd_op.where"],
    ),
    *_dtype_cases(
        "masked_fill",
        lambda x, m: paddle.masked_fill(x, m, 1),
        lambda dt: [Arg((3, 4), dt), Arg((3, 4), "bool")],
        ["float16", "float64", "int64"],
        ["pd_op.masked_fill"],
    ),
    *_dtype_cases(
        "index_add",
        lambda x, i, u: paddle.index_add(x, i, 0, u),
        lambda dt: [Arg((4, 2), dt), IDX, Arg((3, 2), dt)],
        ["float64", "int64"],
        ["pd_op.index_add"],
    ),
    *_dtype_cases(
        "topk", lambda x: paddle.topk(x, 2)[0], lambda dt: [Arg((3, 5), dt)], ["float64", "int32"], ["pd_op.topk"]
    ),
    OpCase(
        "topk_float16",
        lambda x: paddle.topk(x, 2)[0],
        [Arg((3, 5), "float16")],
        ["pd_op.topk"],
        grad=False,
        reason="Paddle's CPU topk has no float16 gradient kernel",
    ),
    *_dtype_cases(
        "argsort",
        lambda x: paddle.sort(x),
        lambda dt: [Arg((3, 5), dt)],
        ["float16", "bfloat16", "float64"],
        ["pd_op.argsort"],
    ),
]
