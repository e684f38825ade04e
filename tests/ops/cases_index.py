"""Gathers, scatters, where and advanced indexing. Sorting: cases_index_sort.py."""

import paddle

from .harness import Arg, OpCase

X = Arg((4, 5))
IDX = Arg((3,), "int64", low=0, high=4)  # may repeat: gathers and adds allow it
KEY = Arg((4,), grad=False)  # argsort(KEY) gives distinct indices


def _distinct(key, n):
    """n distinct indices computed in the program (traced, not constants)."""
    return paddle.argsort(key)[:n]


def _setitem(index_fn):
    def fn(x, v, *rest):
        y = x.clone()
        y[index_fn(*rest)] = v
        return y

    return fn


CASES = [
    # gather family
    OpCase("gather_axis0", lambda x, i: paddle.gather(x, i), [X, IDX], ["pd_op.gather"]),
    OpCase("gather_axis1", lambda x, i: paddle.gather(x, i, axis=1), [X, Arg((6,), "int32", 0, 5)], ["pd_op.gather"]),
    OpCase("gather_negative", lambda x: paddle.gather(x, paddle.to_tensor([-1, 0, -4])), [X], ["pd_op.gather"]),
    OpCase(
        "gather_column_index",
        lambda x, i: paddle.gather(x, i),
        [X, Arg((3, 1), "int64", low=0, high=4)],
        ["pd_op.gather"],
    ),
    OpCase("gather_int64_data", lambda x, i: paddle.gather(x, i), [Arg((4, 3), "int64"), IDX], ["pd_op.gather"]),
    OpCase(
        "gather_nd",
        lambda x, i: paddle.gather_nd(x, i),
        [Arg((3, 4, 5)), Arg((2, 6, 2), "int64", 0, 3)],
        ["pd_op.gather_nd"],
    ),
    OpCase("getitem_tensor", lambda x, i: x[i], [X, IDX], ["pd_op.gather_nd"]),
    OpCase(
        "getitem_two_tensors",
        lambda x, i, j: x[i, j],
        [X, IDX, Arg((3,), "int64", 0, 5)],
        ["pd_op.gather_nd", "pd_op.broadcast_tensors", "pd_op.stack"],
    ),
    OpCase("getitem_tensor_axis1", lambda x, i: x[:, i], [X, IDX], ["pd_op.gather_nd", "pd_op.transpose"]),
    OpCase(
        "getitem_const_bool_mask",
        lambda x: x[paddle.to_tensor([True, False, True, True])],
        [X],
        ["pd_op.nonzero", "pd_op.gather_nd"],
    ),
    OpCase(
        "shard_index", lambda i: paddle.shard_index(i, 20, 3, 1), [Arg((5, 1), "int64", 0, 20)], ["pd_op.shard_index"]
    ),
    OpCase("index_select", lambda x, i: paddle.index_select(x, i, axis=1), [X, IDX], ["pd_op.index_select"]),
    OpCase(
        "index_select_f64",
        lambda x, i: paddle.index_select(x, i),
        [Arg((4, 2), "float64"), IDX],
        ["pd_op.index_select"],
    ),
    OpCase(
        "index_sample", lambda x, i: paddle.index_sample(x, i), [X, Arg((4, 3), "int64", 0, 5)], ["pd_op.index_sample"]
    ),
    OpCase(
        "take_along_axis",
        lambda x, i: paddle.take_along_axis(x, i, 1),
        [X, Arg((4, 7), "int64", 0, 5)],
        ["pd_op.take_along_axis"],
    ),
    OpCase(
        "take_along_axis_bcast",
        lambda x, i: paddle.take_along_axis(x, i, 0),
        [X, Arg((2, 1), "int64", 0, 4)],
        ["pd_op.take_along_axis"],
    ),
    # scatter family: gradients reach both the updated tensor and the updates
    OpCase(
        "scatter_overwrite",
        lambda x, u, k: paddle.scatter(x, _distinct(k, 3), u),
        [X, Arg((3, 5)), KEY],
        ["pd_op.scatter"],
    ),
    OpCase(
        "scatter_add_dups",
        lambda x, u, i: paddle.scatter(x, i, u, overwrite=False),
        [X, Arg((3, 5)), IDX],
        ["pd_op.scatter"],
    ),
    OpCase(
        "scatter_int",
        lambda x, u: paddle.scatter(x, paddle.to_tensor([2, 0]), u),
        [Arg((4, 2), "int64"), Arg((2, 2), "int64")],
        ["pd_op.scatter"],
    ),
    OpCase(
        "scatter_inplace",
        lambda x, u: paddle._C_ops.scatter_(x.clone(), paddle.to_tensor([3, 1]), u, False),
        [X, Arg((2, 5))],
        ["pd_op.scatter_"],
    ),
    OpCase(
        "scatter_nd_add",
        lambda x, i, u: paddle.scatter_nd_add(x, i, u),
        [Arg((3, 4, 5)), Arg((6, 2), "int64", 0, 3), Arg((6, 5))],
        ["pd_op.scatter_nd_add"],
    ),
    OpCase("index_add", lambda x, i, u: paddle.index_add(x, i, 1, u), [X, IDX, Arg((4, 3))], ["pd_op.index_add"]),
    OpCase(
        "index_add_inplace",
        lambda x, i, u: paddle._C_ops.index_add_(x.clone(), i, u, 0),
        [X, IDX, Arg((3, 5))],
        ["pd_op.index_add_"],
    ),
    # put_along_axis
    OpCase(
        "put_along_axis_assign",
        lambda x, v, k: paddle.put_along_axis(x, paddle.argsort(k, axis=1)[:, :2], v, 1),
        [X, Arg((4, 2)), Arg((4, 5), grad=False)],
        ["pd_op.put_along_axis"],
    ),
    OpCase(
        "put_along_axis_add",
        lambda x, i, v: paddle.put_along_axis(x, i, v, 1, "add"),
        [X, Arg((4, 6), "int64", 0, 5), Arg((4, 6))],
        ["pd_op.put_along_axis"],
    ),
    OpCase(
        "put_along_axis_add_scalar",
        lambda x, i: paddle.put_along_axis(x, i, 1.5, 0, "add", include_self=False),
        [X, Arg((3, 5), "int64", 0, 4)],
        ["pd_op.put_along_axis"],
    ),
    OpCase(
        "put_along_axis_mul",
        lambda x, i, v: paddle.put_along_axis(x, i, v, 1, "mul"),
        [X, Arg((4, 3), "int64", 0, 5), Arg((4, 3))],
        ["pd_op.put_along_axis"],
    ),
    OpCase(
        "put_along_axis_mean",
        lambda x, i, v: paddle.put_along_axis(x, i, v, 1, "mean"),
        [X, Arg((4, 6), "int64", 0, 5), Arg((4, 6))],
        ["pd_op.put_along_axis"],
    ),
    OpCase(
        "put_along_axis_mean_excl",
        lambda x, i, v: paddle.put_along_axis(x, i, v, 1, "mean", include_self=False),
        [X, Arg((4, 6), "int64", 0, 5), Arg((4, 6))],
        ["pd_op.put_along_axis"],
    ),
    OpCase(
        "put_along_axis_amax",
        lambda x, i, v: paddle.put_along_axis(x, i, v, 1, "amax"),
        [X, Arg((4, 2), "int64", 0, 5), Arg((4, 2))],
        ["pd_op.put_along_axis"],
    ),
    OpCase(
        "put_along_axis_amin_excl",
        lambda x, i, v: paddle.put_along_axis(x, i, v, 1, "amin", include_self=False),
        [X, Arg((4, 2), "int64", 0, 5), Arg((4, 2))],
        ["pd_op.put_along_axis"],
    ),
    OpCase(
        "put_along_axis_int",
        lambda x, i, v: paddle.put_along_axis(x, i, v, 0, "add"),
        [Arg((4, 3), "int64"), Arg((5, 3), "int64", 0, 4), Arg((5, 3), "int64")],
        ["pd_op.put_along_axis"],
    ),
    OpCase(
        "put_along_axis_inplace",
        lambda x, v: paddle._C_ops.put_along_axis_(
            x.clone(), paddle.to_tensor([[1], [0], [4], [2]]), v, 1, "assign", True
        ),
        [X, Arg((4, 1))],
        ["pd_op.put_along_axis_"],
    ),
    # where / masked_fill
    OpCase("where", lambda c, x, y: paddle.where(c, x, y), [Arg((4, 5), "bool"), X, Arg((1, 5))], ["pd_op.where"]),
    OpCase(
        "where_int",
        lambda c, x, y: paddle.where(c, x, y),
        [Arg((3, 1), "bool"), Arg((3, 4), "int64"), Arg((3, 4), "int64")],
        ["pd_op.where"],
    ),
    OpCase(
        "where_inplace",
        lambda c, x, y: paddle._C_ops.where_(c, x.clone(), y),
        [Arg((4, 5), "bool"), X, X],
        ["pd_op.where_"],
    ),
    OpCase("masked_fill", lambda x, m: paddle.masked_fill(x, m, 2.0), [X, Arg((4, 5), "bool")], ["pd_op.masked_fill"]),
    OpCase(
        "masked_fill_tensor_value",
        lambda x, m, v: paddle.masked_fill(x, m, v),
        [X, Arg((5,), "bool"), Arg(())],
        ["pd_op.masked_fill"],
    ),
    OpCase(
        "masked_fill_inplace",
        lambda x, m, v: paddle._C_ops.masked_fill_(x.clone(), m, v),
        [X, Arg((4, 5), "bool"), Arg(())],
        ["pd_op.masked_fill_"],
    ),
    # index_put: x[index_tensor] = v
    OpCase("setitem_index_tensor", _setitem(lambda k: _distinct(k, 2)), [X, Arg((2, 5)), KEY], ["pd_op.index_put"]),
    OpCase(
        "setitem_bool_mask_const",
        lambda x, m: _setitem(lambda: m)(x, 1.5),
        [X, Arg((4, 5), "bool")],
        ["pd_op.index_put"],
    ),
    # NOTE: eager Paddle routes x[mask] = tensor through another kernel whose value gradient is 0;
    # the captured program's index_put gives the true gradient, so index_put is called directly.
    OpCase(
        "index_put_bool_mask",
        lambda x, m, v: paddle.index_put(x, (m,), v),
        [X, Arg((4, 5), "bool"), Arg(())],
        ["pd_op.index_put"],
    ),
    OpCase("setitem_bool_rows", _setitem(lambda m: m), [X, Arg((5,)), Arg((4,), "bool")], ["pd_op.index_put"]),
    OpCase(
        "setitem_bool_rows_values",
        _setitem(lambda: paddle.to_tensor([True, False, True, True])),
        [X, Arg((3, 5))],
        ["pd_op.index_put"],
    ),
    OpCase(
        "index_put_accumulate",
        lambda x, i, j, v: paddle.index_put(x, (i, j), v, accumulate=True),
        [X, IDX, Arg((3,), "int64", 0, 5), Arg((3,))],
        ["pd_op.index_put"],
    ),
    OpCase(
        "index_put_inplace",
        lambda x, v, k: paddle._C_ops.index_put_(x.clone(), [_distinct(k, 2)], v, False),
        [X, Arg((5,)), KEY],
        ["pd_op.index_put_"],
    ),
    OpCase("index_fill", lambda x: paddle.index_fill(x, paddle.to_tensor([0, 2]), 1, 2.0), [X], ["pd_op.index_put"]),
]

# Attributes no other case sets to a non-default value (test_attribute_coverage.py).
CASES += [
    OpCase(
        "shard_index_fill_minus7",
        lambda i: paddle.shard_index(i, 20, 3, 1, ignore_value=-7),
        [Arg((5, 1), "int64", 0, 20)],
        ["pd_op.shard_index"],
    ),
]
