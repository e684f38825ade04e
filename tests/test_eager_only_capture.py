"""Paddle's eager-only tensor views (`Tensor.view`, `paddle.view`, `Tensor.view_as`), as PaddleFormers' MoE
blocks call them, capture as the reshapes they mean, with Paddle eager's numbers (capture/eager_only.py)."""

import numpy as np
import paddle
import pytest
from paddle.static import InputSpec

import paddle_xla as px
from paddle_xla.errors import CaptureError


class Views(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.linear = paddle.nn.Linear(6, 6)

    def forward(self, x):
        flat = x.view([-1, x.shape[-1]])  # Qwen3-MoE's spelling
        a = self.linear(flat).view(-1, 3)  # DeepSeek-V3's: the shape as several arguments
        b = paddle.view(a, [x.shape[0], -1])  # the function form, DeepSeek-V3's too
        c = b.view(size=[x.shape[0], x.shape[1], 6])
        same = c.view(dtype="float32")  # a view by its own dtype is itself
        return same.view_as(x) * 2, flat.view(paddle.float32)


def test_views_capture_as_reshapes_with_paddles_numbers():
    net = Views()
    x = np.random.default_rng(0).standard_normal((2, 4, 6)).astype("float32")
    want = [t.numpy() for t in net(paddle.to_tensor(x))]
    got = px.compile(net, [InputSpec([2, 4, 6], "float32")])(x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_eager_views_keep_their_meaning_after_capture():
    px.compile(Views(), [InputSpec([2, 4, 6], "float32")])
    x = paddle.arange(6, dtype="float32")
    v = x.view([2, 3])
    v[0, 0] = 10.0  # NOTE: an eager view shares its base's memory; capture put Paddle's view back
    assert float(x[0]) == 10.0


class BitView(paddle.nn.Layer):
    def forward(self, x):
        return x.view("int32")


def test_a_view_that_reinterprets_bits_is_refused_by_name():
    with pytest.raises(CaptureError, match=r"view\(int32\).*astype"):
        px.compile(BitView(), [InputSpec([2, 3], "float32")])
