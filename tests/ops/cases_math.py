import paddle

from .harness import Arg, OpCase

CASES = [
    OpCase("matmul_2d", lambda x, y: paddle.matmul(x, y), [Arg((3, 4)), Arg((4, 5))], ["pd_op.matmul"]),
    OpCase("matmul_batched_ty", lambda x, y: paddle.matmul(x, y, transpose_y=True),
           [Arg((2, 3, 4)), Arg((2, 5, 4))], ["pd_op.matmul"]),
]
