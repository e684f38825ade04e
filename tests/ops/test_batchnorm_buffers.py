"""BatchNorm's running statistics leave the lowered function as new_buffers, exactly as Paddle updates them."""

import numpy as np
import paddle
import pytest
from paddle.static import InputSpec

from paddle_xla import capture
from paddle_xla.lowering.lower import lower


class _Net(paddle.nn.Layer):
    def __init__(self, data_format="NCHW"):
        super().__init__()
        self.bn = paddle.nn.BatchNorm2D(3, momentum=0.8, data_format=data_format)

    def forward(self, x):
        return self.bn(x)


def _split(captured):
    params = {p.name: captured.weights[p.name] for p in captured.graph.trainable()}
    buffers = {p.name: captured.weights[p.name] for p in captured.graph.buffers()}
    return params, buffers


def _perturb_stats(net, rng):
    # NOTE: start from non-trivial running statistics, so the momentum blend is really tested.
    net.bn._mean.set_value(rng.standard_normal(3).astype("float32"))
    net.bn._variance.set_value(rng.uniform(0.5, 2.0, 3).astype("float32"))
    net.bn.weight.set_value(rng.standard_normal(3).astype("float32"))


@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_train_forward_updates_running_stats(data_format):
    rng = np.random.default_rng(0)
    paddle.seed(0)
    net = _Net(data_format)
    _perturb_stats(net, rng)
    shape = [4, 3, 5, 6] if data_format == "NCHW" else [4, 5, 6, 3]
    x = rng.standard_normal(shape).astype("float32")

    captured = capture.from_layer(net, [InputSpec(shape, "float32", "x")], training=True)
    names = {t.name: k for k, t in net.state_dict().items()}
    params, buffers = _split(captured)
    f = lower(captured.graph)
    (y,), new_buffers = f(params, buffers, {captured.graph.feeds[0].name: x})

    net.train()
    want_y = net(paddle.to_tensor(x)).numpy()
    np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-5, atol=1e-5)
    assert {names[n] for n in new_buffers} == {"bn._mean", "bn._variance"}
    for name, value in new_buffers.items():
        want = net.state_dict()[names[name]].numpy()
        np.testing.assert_allclose(np.asarray(value), want, rtol=1e-6, atol=1e-6, err_msg=names[name])


def test_eval_forward_keeps_running_stats():
    rng = np.random.default_rng(1)
    net = _Net()
    _perturb_stats(net, rng)
    x = rng.standard_normal([2, 3, 4, 4]).astype("float32")
    captured = capture.from_layer(net, [InputSpec([2, 3, 4, 4], "float32", "x")], training=False)
    params, buffers = _split(captured)
    (y,), new_buffers = lower(captured.graph)(params, buffers, {captured.graph.feeds[0].name: x})
    net.eval()
    np.testing.assert_allclose(np.asarray(y), net(paddle.to_tensor(x)).numpy(), rtol=1e-5, atol=1e-5)
    for name, value in new_buffers.items():
        np.testing.assert_array_equal(np.asarray(value), buffers[name])
