"""A generator holds its matmul weights once, by what the decode step reads ([N, K] on CPU where only
untransposed matmuls read a float32 weight). Another program of the same model (a prefill) decides for
itself; a weight it reads otherwise reaches it in Paddle's layout again. A square weight would otherwise
be read transposed, with no shape error to say so."""

import numpy as np

from paddle_xla.generation.batch_engine import program
from paddle_xla.graph import Block, Graph, Op, Param, Tensor
from paddle_xla.lowering.policy import LoweringPolicy
from paddle_xla.runtime.held import HeldWeights

X, W, Y, DOUBLED = 1, 2, 3, 4
NK = LoweringPolicy.tuned("cpu", inference=True)


def _graph(*ops):
    return Graph(
        Block((), tuple(ops)),
        feeds=(Tensor("x", X, (2, 4), "float32"),),
        params=(Param("w", W, (4, 4), "float32"),),
        fetches=(Tensor("y", Y, (2, 4), "float32"),),
    )


MATMUL = Op("pd_op.matmul", (X, W), (Y,), {"transpose_x": False, "transpose_y": False})
DECODE = _graph(MATMUL)  # reads w only as a matmul's weight
PREFILL = _graph(
    Op("pd_op.add", (W, W), (DOUBLED,)),  # reads w otherwise too
    Op("pd_op.matmul", (X, DOUBLED), (Y,), {"transpose_x": False, "transpose_y": False}),
)


def test_programs_read_weights_held_by_the_decode_step():
    assert NK.nk_weights
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 4)).astype("float32"), rng.standard_normal((4, 4)).astype("float32")
    held = HeldWeights.for_graph(DECODE, NK)
    assert held.nk == {"w"}
    weights = held.all_prepared({"w": w})
    np.testing.assert_array_equal(weights["w"], w.T)
    np.testing.assert_allclose(program(DECODE, NK, held)(weights, x)[0], x @ w, rtol=1e-6)
    np.testing.assert_allclose(program(PREFILL, NK, held)(weights, x)[0], x @ (w + w), rtol=1e-6)
    # NOTE: weights as Paddle holds them (held=None), to a program that reads w as [N, K]
    np.testing.assert_allclose(program(DECODE, NK)({"w": w}, x)[0], x @ w, rtol=1e-6)
