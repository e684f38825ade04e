import paddle

from .harness import Arg, OpCase

CASES = [
    OpCase("add_broadcast", lambda x, y: paddle.add(x, y), [Arg((2, 3, 4)), Arg((4,))], ["pd_op.add"]),
    OpCase("add_int64", lambda x, y: x + y, [Arg((3, 4), "int64"), Arg((3, 4), "int64")], ["pd_op.add"]),
    OpCase("subtract", lambda x, y: x - y, [Arg((2, 3)), Arg((2, 1))], ["pd_op.subtract"]),
    OpCase("multiply_f64", lambda x, y: x * y, [Arg((2, 3), "float64"), Arg((2, 3), "float64")], ["pd_op.multiply"]),
]
