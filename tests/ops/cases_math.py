import paddle
import paddle.nn.functional as F

from .harness import Arg, OpCase

MM = dict(rtol=1e-5, atol=1e-5, reason="sums of products; Paddle and XLA accumulate in different orders")


def _f64(*shapes):
    return [Arg(s, "float64") for s in shapes]


CASES = [
    # ---- matmul: 1-D operands, broadcast batch dims, transposes, float64 ----
    OpCase("matmul_2d", lambda x, y: paddle.matmul(x, y), [Arg((3, 4)), Arg((4, 5))], ["pd_op.matmul"], **MM),
    OpCase(
        "matmul_batched_ty",
        lambda x, y: paddle.matmul(x, y, transpose_y=True),
        [Arg((2, 3, 4)), Arg((2, 5, 4))],
        ["pd_op.matmul"],
        **MM,
    ),
    OpCase(
        "matmul_tx_ty",
        lambda x, y: paddle.matmul(x, y, transpose_x=True, transpose_y=True),
        [Arg((2, 4, 3)), Arg((5, 4))],
        ["pd_op.matmul"],
        **MM,
    ),
    OpCase("matmul_vec_mat", lambda x, y: paddle.matmul(x, y), [Arg((4,)), Arg((4, 5))], ["pd_op.matmul"], **MM),
    OpCase("matmul_mat_vec", lambda x, y: paddle.matmul(x, y), [Arg((2, 3, 4)), Arg((4,))], ["pd_op.matmul"], **MM),
    OpCase("matmul_vec_vec", lambda x, y: paddle.matmul(x, y), [Arg((4,)), Arg((4,))], ["pd_op.matmul"], **MM),
    OpCase(
        "matmul_broadcast_batch",
        lambda x, y: paddle.matmul(x, y),
        [Arg((2, 1, 3, 4)), Arg((1, 3, 4, 5))],
        ["pd_op.matmul"],
        **MM,
    ),
    # NOTE: Paddle's own matmul backward fails for a 4-D x against a 3-D y: forward only.
    OpCase(
        "matmul_broadcast_rank",
        lambda x, y: paddle.matmul(x, y),
        [Arg((2, 1, 3, 4)), Arg((3, 4, 5))],
        ["pd_op.matmul"],
        grad=False,
        **MM,
    ),
    OpCase(
        "matmul_f64", lambda x, y: paddle.matmul(x, y, transpose_x=True), _f64((2, 4, 3), (2, 4, 5)), ["pd_op.matmul"]
    ),
    OpCase(
        "matmul_int64", lambda x, y: paddle.matmul(x, y), [Arg((3, 4), "int64"), Arg((4, 2), "int64")], ["pd_op.matmul"]
    ),
    OpCase(
        "linear_matmul_add",
        lambda x, w, b: F.linear(x, w, b),
        [Arg((2, 3, 4)), Arg((4, 5)), Arg((5,))],
        ["pd_op.matmul", "pd_op.add"],
        **MM,
    ),
    # ---- bmm / dot / mv / outer / inner ----
    OpCase("bmm", lambda x, y: paddle.bmm(x, y), [Arg((2, 3, 4)), Arg((2, 4, 5))], ["pd_op.bmm"], **MM),
    OpCase("bmm_f64", lambda x, y: paddle.bmm(x, y), _f64((3, 2, 4), (3, 4, 2)), ["pd_op.bmm"]),
    OpCase("dot_1d", lambda x, y: paddle.dot(x, y), [Arg((5,)), Arg((5,))], ["pd_op.dot"], **MM),
    OpCase("dot_2d_rows", lambda x, y: paddle.dot(x, y), [Arg((3, 5)), Arg((3, 5))], ["pd_op.dot"], **MM),
    OpCase("dot_int64", lambda x, y: paddle.dot(x, y), [Arg((5,), "int64"), Arg((5,), "int64")], ["pd_op.dot"]),
    OpCase("mv", lambda x, v: paddle.mv(x, v), [Arg((3, 4)), Arg((4,))], ["pd_op.mv"], **MM),
    OpCase("mv_f64", lambda x, v: paddle.mv(x, v), _f64((3, 4), (4,)), ["pd_op.mv"]),
    OpCase("outer", lambda x, y: paddle.outer(x, y), [Arg((3,)), Arg((4,))], ["pd_op.multiply"]),
    OpCase("inner", lambda x, y: paddle.inner(x, y), [Arg((3, 4)), Arg((5, 4))], ["pd_op.matmul"], **MM),
    # ---- einsum ----
    OpCase(
        "einsum_matmul",
        lambda x, y: paddle.einsum("ij,jk->ik", x, y),
        [Arg((3, 4)), Arg((4, 5))],
        ["pd_op.einsum"],
        **MM,
    ),
    OpCase(
        "einsum_batch_attention",
        lambda q, k: paddle.einsum("bhqd,bhkd->bhqk", q, k),
        [Arg((2, 2, 3, 4)), Arg((2, 2, 5, 4))],
        ["pd_op.einsum"],
        **MM,
    ),
    OpCase("einsum_trace_diag", lambda x: paddle.einsum("ii->i", x), [Arg((4, 4))], ["pd_op.einsum"]),
    OpCase(
        "einsum_sum_outer", lambda x, y: paddle.einsum("i,j->", x, y), [Arg((3,)), Arg((4,))], ["pd_op.einsum"], **MM
    ),
    OpCase(
        "einsum_three",
        lambda x, y, z: paddle.einsum("ij,jk,kl->il", x, y, z),
        [Arg((2, 3)), Arg((3, 4)), Arg((4, 2))],
        ["pd_op.einsum"],
        **MM,
    ),
    OpCase(
        "einsum_ellipsis_f64",
        lambda x, y: paddle.einsum("...ij,...jk", x, y),
        _f64((2, 3, 4), (2, 4, 3)),
        ["pd_op.einsum"],
    ),
    # ---- kron / addmm / baddbmm / cross / trace ----
    OpCase("kron", lambda x, y: paddle.kron(x, y), [Arg((2, 3)), Arg((2, 2))], ["pd_op.kron"]),
    OpCase("kron_3d_f64", lambda x, y: paddle.kron(x, y), _f64((2, 2, 1), (1, 3)), ["pd_op.kron"]),
    OpCase(
        "addmm",
        lambda c, x, y: paddle.addmm(c, x, y, 0.5, 2.0),
        [Arg((3, 5)), Arg((3, 4)), Arg((4, 5))],
        ["pd_op.addmm"],
        **MM,
    ),
    OpCase(
        "addmm_bcast_input",
        lambda c, x, y: paddle.addmm(c, x, y),
        [Arg((5,)), Arg((3, 4)), Arg((4, 5))],
        ["pd_op.addmm"],
        **MM,
    ),
    OpCase(
        "baddbmm",
        lambda c, x, y: paddle.baddbmm(c, x, y, 0.5, 2.0),
        [Arg((2, 3, 5)), Arg((2, 3, 4)), Arg((2, 4, 5))],
        ["pd_op.baddbmm"],
        **MM,
    ),
    OpCase("cross_default_axis", lambda x, y: paddle.cross(x, y), [Arg((4, 3)), Arg((4, 3))], ["pd_op.cross"]),
    OpCase("cross_axis0_f64", lambda x, y: paddle.cross(x, y, axis=0), _f64((3, 4), (3, 4)), ["pd_op.cross"]),
    OpCase("trace", lambda x: paddle.trace(x), [Arg((4, 4))], ["pd_op.trace"]),
    OpCase(
        "trace_offset_axes", lambda x: paddle.trace(x, offset=1, axis1=2, axis2=0), [Arg((4, 3, 5))], ["pd_op.trace"]
    ),
]
