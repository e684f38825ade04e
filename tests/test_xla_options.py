"""Per-program XLA options: convolution programs on CPU leave convolutions to XLA's own emitter,
others keep XLA's defaults, and a user's XLA_FLAGS setting of the same option wins."""

import numpy as np
import paddle
from paddle.static import InputSpec

import paddle_xla as px
from paddle_xla.runtime.xla_options import YNN_TYPES, inference_options


def _graph(net, spec):
    net.eval()
    return px.compile(net, spec).compiled.graph


def test_conv_programs_get_the_option_and_keep_parity(monkeypatch):
    paddle.seed(0)
    net = paddle.nn.Sequential(
        paddle.nn.Conv2D(3, 8, 3), paddle.nn.ReLU(), paddle.nn.Flatten(), paddle.nn.Linear(8 * 6 * 6, 4)
    )
    net.eval()
    spec = [InputSpec([None, 3, 8, 8], "float32", "x")]
    model = px.compile(net, spec)
    assert inference_options(model.compiled.graph) == {YNN_TYPES: "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype("float32")
    np.testing.assert_allclose(model(x), net(paddle.to_tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    monkeypatch.setenv("XLA_FLAGS", f"--{YNN_TYPES}=+eltwise")
    assert inference_options(model.compiled.graph) is None


def test_matmul_programs_keep_xla_defaults():
    graph = _graph(paddle.nn.Linear(4, 3), [InputSpec([None, 4], "float32", "x")])
    assert inference_options(graph) is None


def test_a_conv_artifact_compiles_with_the_same_options(tmp_path):
    from paddle_xla.artifact import reader as artifact

    paddle.seed(0)
    net = paddle.nn.Sequential(paddle.nn.Conv2D(16, 64, 3), paddle.nn.ReLU())
    net.eval()
    spec = [InputSpec([None, 16, 8, 8], "float32", "x")]
    px.export(px.compile(net, spec), str(tmp_path / "conv.pxa"))
    x = np.random.default_rng(1).standard_normal((2, 16, 8, 8)).astype("float32")
    loaded = artifact.load(str(tmp_path / "conv.pxa"))
    assert loaded.manifest["convolutions"] is True
    np.testing.assert_allclose(loaded(x), net(paddle.to_tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    (exe,) = loaded._runs.values()
    hlo = exe.as_text()
    assert "convolution(" in hlo and "ynn_fusion" not in hlo  # XLA's emitter, not a YNNPACK fusion
