"""Result dtypes against Paddle's, for cases where they can differ: the parity harness compares values
(assert_array_equal passes int64 against int32), so a promoted dtype would go unnoticed there."""

import numpy as np
import paddle
import pytest

from paddle_xla import x64

from . import harness
from .harness import Arg, OpCase

CASES = [
    # NOTE: jnp.prod promotes int32 to int64 (like NumPy); Paddle's prod keeps the input's dtype.
    OpCase("prod_int32_all", lambda x: paddle.prod(x), [Arg((3, 4), "int32", -3, 3)], ["pd_op.prod"]),
    OpCase("prod_int32_axis", lambda x: paddle.prod(x, axis=1), [Arg((3, 4), "int32", -3, 3)], ["pd_op.prod"]),
    OpCase("prod_int64", lambda x: paddle.prod(x, axis=0), [Arg((3, 4), "int64", -3, 3)], ["pd_op.prod"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@x64.enabled
def test_dtype_matches_paddle(case):
    xs = [a.make(np.random.default_rng(case.seed)) for a in case.args]
    want, _, cots, diff = harness.run_paddle(case, xs, case.seed + 1)
    got, _ = harness.run_xla(case, xs, cots, diff)
    assert [g.dtype for g in got] == [w.dtype for w in want], case.id
