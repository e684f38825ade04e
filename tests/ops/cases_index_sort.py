"""topk, argsort/sort, searchsorted, one_hot. Inputs are random normals, so values never tie:
Paddle's unstable sorts have no tie order to match."""

import paddle
import paddle.nn.functional as F

from .harness import Arg, OpCase

X = Arg((4, 6))


def _sorted_rows(x, v):
    return paddle.searchsorted(paddle.sort(x, axis=-1), v)


CASES = [
    OpCase("topk", lambda x: paddle.topk(x, 3), [X], ["pd_op.topk"]),
    OpCase("topk_axis0_smallest", lambda x: paddle.topk(x, 2, axis=0, largest=False), [X], ["pd_op.topk"]),
    OpCase("topk_f64_3d", lambda x: paddle.topk(x, 2, axis=1), [Arg((2, 5, 3), "float64")], ["pd_op.topk"]),
    OpCase("topk_int", lambda x: paddle.topk(x, 2), [Arg((3, 5), "int64", 0, 1000)], ["pd_op.topk"], outputs=[0]),
    # NOTE: sorted=False leaves Paddle's order to its heap; compare the sorted values instead.
    OpCase("topk_unsorted", lambda x: paddle.sort(paddle.topk(x, 3, sorted=False)[0]), [X], ["pd_op.topk"]),
    OpCase("argsort", lambda x: paddle.argsort(x, axis=1), [X], ["pd_op.argsort"]),
    OpCase(
        "argsort_desc_stable",
        lambda x: paddle.argsort(x, axis=0, descending=True, stable=True),
        [Arg((5, 3), "int64", 0, 3)],
        ["pd_op.argsort"],
    ),
    OpCase(
        "argsort_stable_ties", lambda x: paddle.argsort(x, stable=True), [Arg((3, 8), "int32", 0, 4)], ["pd_op.argsort"]
    ),
    OpCase("sort", lambda x: paddle.sort(x, axis=-1, descending=True), [X], ["pd_op.argsort"]),
    OpCase("sort_f64", lambda x: paddle.sort(x, axis=0), [Arg((5, 2), "float64")], ["pd_op.argsort"]),
    OpCase(
        "searchsorted",
        lambda s, v: paddle.searchsorted(paddle.sort(s), v),
        [Arg((7,)), Arg((3, 4))],
        ["pd_op.searchsorted"],
        grad=False,
        reason="searchsorted returns indices",
    ),
    OpCase(
        "searchsorted_right_int32",
        lambda s, v: paddle.searchsorted(paddle.sort(s), v, out_int32=True, right=True),
        [Arg((6,), "int64", 0, 10), Arg((5,), "int64", 0, 10)],
        ["pd_op.searchsorted"],
    ),
    OpCase(
        "searchsorted_rows",
        _sorted_rows,
        [X, Arg((4, 3))],
        ["pd_op.searchsorted"],
        grad=False,
        reason="searchsorted returns indices",
    ),
    OpCase("one_hot", lambda i: F.one_hot(i, 5), [Arg((2, 3), "int64", 0, 5)], ["pd_op.one_hot"]),
    OpCase("one_hot_int32", lambda i: F.one_hot(i, 4), [Arg((6,), "int32", 0, 4)], ["pd_op.one_hot"]),
]
