"""pd_op.if / pd_op.while lower to lax.cond / lax.while_loop and match Paddle."""

import numpy as np
import paddle
from paddle.static import InputSpec

import paddle_xla as px


class Branchy(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc = paddle.nn.Linear(4, 4)

    def forward(self, x, n):
        h = self.fc(x)
        if h.sum() > 0:
            h = h * 2.0
        else:
            h = h - 1.0
        i = paddle.zeros([1], "int64")
        while i < n:
            h = paddle.tanh(h) + 1.0
            i = i + 1
        return h


def test_if_and_while_match_paddle():
    paddle.seed(1)
    net = Branchy()
    model = px.compile(net, [InputSpec([None, 4], "float32", "x"), InputSpec([1], "int64", "n")])
    rng = np.random.default_rng(0)
    for sign in (1.0, -1.0):
        x = (sign * np.abs(rng.standard_normal((3, 4)))).astype("float32")
        for n in (0, 3):
            want = net(paddle.to_tensor(x), paddle.to_tensor(np.array([n]))).numpy()
            got = model(x, np.array([n], "int64"))
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


class DropoutLoop(paddle.nn.Layer):
    def forward(self, x, n):
        out = paddle.zeros_like(x)
        i = paddle.zeros([1], "int64")
        while i < n:
            out = out + paddle.nn.functional.dropout(x, 0.5, training=True)
            i = i + 1
        return out


def test_random_ops_in_a_loop_draw_anew_each_iteration():
    model = px.compile(DropoutLoop(), [InputSpec([4096], "float32", "x"), InputSpec([1], "int64", "n")])
    got = model(np.ones(4096, "float32"), np.array([4], "int64"))
    # NOTE: dropout(p=0.5) keeps and doubles; 4 independent masks give sums 0, 2, ..., 8 binomially
    # (one mask reused would give only 0 or 8).
    counts = {v: int((got == v).sum()) for v in (0.0, 2.0, 4.0, 6.0, 8.0)}
    assert sum(counts.values()) == 4096 and counts[4.0] > 4096 * 0.3, counts
