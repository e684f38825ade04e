"""Conv filters held as HWIO, and float32 matmul weights as [N, K], by an inference program on CPU:
outputs, new weights, export and px.Model evaluation all still see Paddle's OIHW and [K, N] weights."""

import numpy as np
import paddle
import paddle.nn as nn
import pytest
from paddle.static import InputSpec

import paddle_xla as px
from paddle_xla.artifact import reader as artifact


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2D(3, 8, 3, stride=2, padding=1)
        self.dw = nn.Conv2D(8, 8, 3, padding="SAME", groups=8)
        self.bn = nn.BatchNorm2D(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        h = nn.functional.relu(self.bn(self.dw(self.conv(x))))
        return self.fc(h.mean([2, 3]))


SPEC = [InputSpec([None, 3, 10, 10], "float32", "x")]
X = np.random.default_rng(0).standard_normal((2, 3, 10, 10)).astype("float32")


def _model():
    paddle.seed(0)
    net = Net()
    net.eval()
    return net, px.compile(net, SPEC)


def test_filters_are_held_as_hwio_and_outputs_match():
    net, model = _model()
    held = {k: tuple(v.shape) for k, v in model.compiled.params.items()}
    assert held[net.conv.weight.name] == (3, 3, 3, 8) and held[net.dw.weight.name] == (3, 3, 1, 8)
    assert held[net.fc.weight.name] == (4, 8)  # a matmul weight: [N, K]
    np.testing.assert_allclose(model(X), net(paddle.to_tensor(X)).numpy(), rtol=1e-5, atol=1e-6)


def test_set_weights_takes_paddle_layout():
    net, model = _model()
    with paddle.no_grad():
        net.conv.weight.set_value(net.conv.weight * 2.0)
    model.compiled.set_weights({net.conv.weight.name: net.conv.weight.numpy()})
    np.testing.assert_allclose(model(X), net(paddle.to_tensor(X)).numpy(), rtol=1e-5, atol=1e-6)


def test_export_writes_paddle_layout(tmp_path):
    net, model = _model()
    px.export(model, str(tmp_path / "cnn.pxa"))
    loaded = artifact.load(str(tmp_path / "cnn.pxa"))
    np.testing.assert_allclose(loaded(X), net(paddle.to_tensor(X)).numpy(), rtol=1e-5, atol=1e-6)
    again = artifact.load(str(tmp_path / "cnn.pxa"), prefer_graph=True)
    np.testing.assert_allclose(again(X), net(paddle.to_tensor(X)).numpy(), rtol=1e-5, atol=1e-6)


def test_cpu_export_holds_filters_as_hwio(tmp_path):
    net, model = _model()
    px.export(model, str(tmp_path / "cnn.pxa"))
    loaded = artifact.load(str(tmp_path / "cnn.pxa"))
    assert loaded.manifest["exported"]["cpu"]["hwio_filters"] == sorted([net.conv.weight.name, net.dw.weight.name])
    assert tuple(loaded.params[net.conv.weight.name].shape) == (3, 3, 3, 8)
    np.testing.assert_allclose(loaded(X), net(paddle.to_tensor(X)).numpy(), rtol=1e-5, atol=1e-6)


class Linears(nn.Layer):
    """A square weight (held transposed it would still fit: only the layout tells), a wide one, one also read
    by another op, and one read as transpose_y."""

    def __init__(self):
        super().__init__()
        self.square, self.wide = nn.Linear(8, 8), nn.Linear(8, 16)
        self.shared = self.create_parameter([16, 16])
        self.by_rows = self.create_parameter([8, 16])

    def forward(self, x):
        h = paddle.matmul(self.wide(nn.functional.relu(self.square(x))), self.shared)
        return (
            h
            + self.shared.sum(0)
            + paddle.matmul(x, self.by_rows.T.T, transpose_y=False)
            + paddle.matmul(h, self.by_rows, transpose_y=True).sum(-1, keepdim=True)
        )


def _linears():
    paddle.seed(0)
    net = Linears()
    net.eval()
    return net, px.compile(net, [InputSpec([None, 8], "float32", "x")])


XL = np.random.default_rng(1).standard_normal((3, 8)).astype("float32")


def test_matmul_weights_are_held_as_nk_and_outputs_match(tmp_path):
    net, model = _linears()
    held = {k: tuple(v.shape) for k, v in model.compiled.params.items()}
    assert held[net.square.weight.name] == (8, 8) and held[net.wide.weight.name] == (16, 8)
    assert held[net.shared.name] == (16, 16) and held[net.by_rows.name] == (8, 16)  # read by other ops too
    assert model.compiled.held.nk == {net.square.weight.name, net.wide.weight.name}
    want = net(paddle.to_tensor(XL)).numpy()
    np.testing.assert_allclose(model(XL), want, rtol=1e-5, atol=1e-5)
    with paddle.no_grad():
        net.square.weight.set_value(net.square.weight * -2.0)
    model.compiled.set_weights({net.square.weight.name: net.square.weight.numpy()})
    want = net(paddle.to_tensor(XL)).numpy()
    np.testing.assert_allclose(model(XL), want, rtol=1e-5, atol=1e-5)
    px.export(model, str(tmp_path / "mlp.pxa"))
    loaded = artifact.load(str(tmp_path / "mlp.pxa"))
    assert loaded.mode == "exported"
    assert loaded.manifest["exported"]["cpu"]["nk_weights"] == sorted([net.square.weight.name, net.wide.weight.name])
    np.testing.assert_allclose(loaded(XL), want, rtol=1e-5, atol=1e-5)
    again = artifact.load(str(tmp_path / "mlp.pxa"), prefer_graph=True)
    np.testing.assert_allclose(again(XL), want, rtol=1e-5, atol=1e-5)


def test_bf16_export_runs_the_same_kernel_forms_as_compile(tmp_path):
    net, x, bf16 = _bf16_zoo()
    px.export(bf16, str(tmp_path / "zoo.pxa"))
    loaded = artifact.load(str(tmp_path / "zoo.pxa"))
    assert loaded.mode == "exported"
    for got, want in zip(loaded(x), bf16(x)):
        np.testing.assert_array_equal(got, want)
    # the weights are held as the live model holds them: half where only white-list ops read them
    held = sorted(k for k, v in bf16.compiled.params.items() if v.dtype == "bfloat16")
    assert held and loaded.manifest["exported"]["cpu"]["half_weights"] == held
    assert {k: str(v.dtype) for k, v in loaded.params.items()} == {
        k: str(v.dtype) for k, v in bf16.compiled.params.items()
    }


Y = np.array([1, 3], "int64")


def _prepared(cls):
    """A px.Model or paddle.Model of Net with Momentum and cross entropy, from seed 0."""
    paddle.seed(0)
    net = Net()
    model = cls(net, SPEC, [InputSpec([None], "int64", "y")])
    model.prepare(paddle.optimizer.Momentum(0.05, parameters=net.parameters()), nn.CrossEntropyLoss())
    return model


def test_px_model_evaluates_a_cnn_with_trained_weights():
    def run(cls):
        model, y = _prepared(cls), Y
        for _ in range(3):
            model.train_batch([X], [y])
        return model.eval_batch([X], [y])[0], model.predict_batch([X])[0]

    (loss_x, pred_x), (loss_p, pred_p) = run(px.Model), run(paddle.Model)
    np.testing.assert_allclose(np.asarray(loss_x).ravel(), np.asarray(loss_p).ravel(), rtol=1e-4)
    np.testing.assert_allclose(pred_x, pred_p, rtol=1e-4, atol=1e-5)


def test_px_model_evaluates_with_statistics_from_accumulation_passes():
    def run(cls):
        model, y = _prepared(cls), Y
        model.train_batch([X], [y])
        first = model.eval_batch([X], [y])[0]
        model.train_batch([X * 2.0], [y], update=False)  # moves BatchNorm's running statistics only
        return first, model.eval_batch([X], [y])[0]

    (a_x, b_x), (a_p, b_p) = run(px.Model), run(paddle.Model)
    np.testing.assert_allclose(np.asarray(a_x).ravel(), np.asarray(a_p).ravel(), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(b_x).ravel(), np.asarray(b_p).ravel(), rtol=1e-4)
    assert not np.allclose(np.asarray(a_p).ravel(), np.asarray(b_p).ravel())


# ---- bf16 convolutions as GEMMs over their patches ------------------------------------------------
class ConvZoo(nn.Layer):
    """Every shape of convolution _bf16_conv_as_gemm takes, one (groups=2) it leaves to lax.conv, and two the
    float32 emitter runs faster: an RGB stem (thin runs of 3 channels) and a head with few outputs."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2D(3, 64, 7, stride=2, padding=3)
        self.dilated = nn.Conv2D(64, 64, 3, padding=2, dilation=2)
        self.same = nn.Conv2D(64, 64, 3, padding="SAME")
        self.grouped = nn.Conv2D(64, 64, 3, padding=1, groups=2)
        self.down = nn.Conv2D(64, 64, 1, stride=2)
        self.nhwc = nn.Conv2D(64, 64, 3, stride=2, padding=[1, 0], data_format="NHWC")
        self.head = nn.Conv2D(64, 4, 3, padding=1)
        self.small = nn.Conv2D(3, 48, 3, padding=1)  # a 27-value patch stays a GEMM

    def forward(self, x):
        h = self.down(self.grouped(self.same(self.dilated(self.stem(x)))))
        return self.nhwc(h.transpose([0, 2, 3, 1])), self.head(h), self.small(x)


def _bf16_zoo():
    """(ConvZoo in eval mode, an input, the net compiled under bf16)."""
    paddle.seed(0)
    net = ConvZoo()
    net.eval()
    x = np.random.default_rng(1).standard_normal((2, 3, 19, 19)).astype("float32")
    return (
        net,
        x,
        px.compile(net, [InputSpec([None, 3, 19, 19], "float32", "x")], strategy=px.Strategy(precision="bf16")),
    )


def test_bf16_convolutions_run_as_bf16_gemms():
    net, x, bf16 = _bf16_zoo()
    for got, want in zip(bf16(x), [t.numpy() for t in net(paddle.to_tensor(x))]):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=2e-2 * np.abs(want).max())
    eqns = bf16.compiled.jaxpr(x).jaxpr.eqns
    convs = [e for e in eqns if e.primitive.name == "conv_general_dilated"]
    dots = [e for e in eqns if e.primitive.name == "dot_general"]
    assert sorted(c.params["feature_group_count"] for c in convs) == [1, 1, 2]
    on_emitter = [c for c in convs if c.params["feature_group_count"] == 1]
    assert sorted(c.invars[1].aval.shape for c in on_emitter) == [(3, 3, 64, 4), (7, 7, 3, 64)]
    assert all(v.aval.dtype == "float32" for c in on_emitter for v in c.invars)
    assert len(dots) == 5 and all(v.aval.dtype == "bfloat16" for e in dots for v in e.invars)


def test_bf16_conv_as_gemm_equals_the_convolution_of_the_same_bf16_values():
    import jax.numpy as jnp
    from jax import lax

    from paddle_xla.lowering.layouts import _bf16_conv_as_gemm

    rng = np.random.default_rng(0)
    for k, stride, pads, dil in [(7, 2, [(3, 3), (3, 3)], 1), (3, 1, [(2, 1), (0, 2)], 2), (1, 2, [(0, 0)] * 2, 1)]:
        x = jnp.asarray(rng.standard_normal((2, 5, 13, 11)), jnp.bfloat16)
        w = jnp.asarray(rng.standard_normal((k, k, 5, 6)), jnp.bfloat16)
        want = lax.conv_general_dilated(
            x.astype("float32"),
            w.astype("float32"),
            (stride, stride),
            pads,
            rhs_dilation=(dil, dil),
            dimension_numbers=("NCHW", "HWIO", "NCHW"),
            precision="highest",
        )
        got = _bf16_conv_as_gemm(x, w, (stride, stride), pads, (dil, dil), "NCHW")
        assert got.dtype == jnp.bfloat16 and got.shape == want.shape
        np.testing.assert_allclose(np.asarray(got, "float32"), np.asarray(want), rtol=8e-3, atol=1e-4)


# ---- channels-last activations -----------------------------------------------------------------------
class Mixed(nn.Layer):
    """Convs with bias, a broadcast scale (SE-style), a residual, pools, a grouped conv, and ops that
    must see NCHW (flatten, a transpose, a reduction over channels) in between."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2D(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2D(8)
        self.c2 = nn.Conv2D(8, 8, 3, padding=1, groups=4)
        self.pool = nn.MaxPool2D(2, 2)
        self.se = nn.Linear(8, 8)
        self.c3 = nn.Conv2D(8, 8, 1)
        self.gap = nn.AdaptiveAvgPool2D(1)
        self.fc = nn.Linear(8 + 5 * 5, 4)

    def forward(self, x):
        h = nn.functional.relu(self.bn(self.c1(x)))
        h = self.pool(h + self.c2(h))
        scale = nn.functional.sigmoid(self.se(h.mean([2, 3])))
        h = self.c3(h * scale.unsqueeze([2, 3]) + 0.5)
        by_pixel = h.transpose([0, 2, 3, 1]).sum(-1).flatten(1)  # reads the channels as NCHW
        return self.fc(paddle.concat([self.gap(h).flatten(1), by_pixel], axis=1)), h


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_channels_last_activations_match_paddle(precision):
    paddle.seed(0)
    net = Mixed()
    net.eval()
    spec = [InputSpec([None, 3, 10, 10], "float32", "x")]
    x = np.random.default_rng(2).standard_normal((2, 3, 10, 10)).astype("float32")
    strategy = px.Strategy(precision=precision) if precision != "fp32" else None
    got = px.compile(net, spec, strategy=strategy)(x)
    want = [t.numpy() for t in net(paddle.to_tensor(x))]
    for g, w in zip(got, want):
        assert g.shape == w.shape  # the NCHW activation comes back NCHW
        tol = dict(rtol=1e-5, atol=1e-5) if precision == "fp32" else dict(atol=2e-2 * np.abs(w).max())
        np.testing.assert_allclose(g, w, **tol)


def test_channels_last_removes_the_transposes_around_convolutions():
    paddle.seed(0)
    net = paddle.vision.models.resnet18()
    net.eval()
    model = px.compile(net, [InputSpec([None, 3, 32, 32], "float32", "x")])
    live = _live_eqns(model.compiled.jaxpr(np.zeros((1, 3, 32, 32), "float32")).jaxpr)
    # NOTE: the input's, and the last feature map's before the classifier's flatten.
    assert sum(e.primitive.name == "transpose" for e in live) == 2


def _live_eqns(jaxpr):
    """The equations whose results reach an output (XLA drops the rest)."""
    from jax.extend.core import Var

    needed, live = {v for v in jaxpr.outvars if isinstance(v, Var)}, []
    for e in reversed(jaxpr.eqns):
        if any(v in needed for v in e.outvars):
            live.append(e)
            needed |= {v for v in e.invars if isinstance(v, Var)}
    return live


class MixedLogits(nn.Layer):
    def __init__(self):
        super().__init__()
        self.body = Mixed()

    def forward(self, x):
        return self.body(x)[0]


def test_channels_last_training_matches_paddle():
    """The live train step on CPU holds activations channels-last, BatchNorm in train mode included."""
    from paddle_xla.lowering.lower import plan
    from paddle_xla.lowering.policy import LoweringPolicy

    def losses(use_px):
        paddle.seed(0)
        net = MixedLogits()
        opt = paddle.optimizer.Momentum(0.05, parameters=net.parameters())
        x = np.random.default_rng(3).standard_normal((4, 3, 10, 10)).astype("float32")
        y = np.array([0, 1, 2, 3], "int64")
        if use_px:
            step = px.train_step(
                net,
                nn.CrossEntropyLoss(),
                opt,
                [InputSpec([None, 3, 10, 10], "float32", "x")],
                [InputSpec([None], "int64", "y")],
            )
            assert plan(step.graph, LoweringPolicy.live()).nhwc_filters
            return [float(np.asarray(step(x, y))) for _ in range(4)]
        out = []
        for _ in range(4):
            loss = nn.CrossEntropyLoss()(net(paddle.to_tensor(x)), paddle.to_tensor(y))
            loss.backward()
            opt.step()
            opt.clear_grad()
            out.append(float(loss))
        return out

    np.testing.assert_allclose(losses(True), losses(False), rtol=1e-4)


def _stablehlo(target):
    from paddle_xla import capture
    from paddle_xla.lowering.lower import lower
    from paddle_xla.lowering.policy import LoweringPolicy

    paddle.seed(0)
    net = Net()
    net.eval()
    graph = capture.from_layer(net, SPEC).graph
    f = lower(graph, LoweringPolicy.tuned(target))
    weights = {p.name: np.zeros(p.shape, p.dtype) for p in graph.params}
    import jax

    return jax.jit(lambda w, x: f(w, {}, {"x": x})[0]).lower(weights, X).as_text()


def test_depthwise_and_stem_convs_run_as_shifted_sums_on_cpu_only():
    """XLA:CPU's grouped convolution is 15-35x slower than fused multiply-adds, and its emitter 2-4x slower
    on an RGB stem (ops/depthwise.py); cuDNN's kernels are the better ones, so a CUDA export keeps both."""
    cpu, cuda = _stablehlo("cpu"), _stablehlo("cuda")
    assert "stablehlo.convolution" not in cpu
    assert "feature_group_count = 8" in cuda and cuda.count("stablehlo.convolution") == 2


# ---- small max pools as shifted maxima (inference on CPU) ----------------------------------------------
class Pools(nn.Layer):
    """Max pools of the shapes CNNs use, each read by its own output; the 5x5 one keeps reduce_window."""

    def forward(self, x):
        F = nn.functional
        relu = F.relu(x - 0.5)  # ties: many zeros in one window
        return (
            F.max_pool2d(relu, 3, 2, 1),
            F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
            F.max_pool2d(x, (3, 2), (2, 1), padding=[1, 2, 0, 1]),
            F.max_pool2d(x, 2, 2),
            F.max_pool2d(x, 3, 2, padding="SAME"),
            F.max_pool2d(x.transpose([0, 2, 3, 1]), 3, 2, 1, data_format="NHWC"),
            F.max_pool2d(x, 5, 1, 2),
        )


def test_small_max_pools_are_shifted_maxima_with_paddles_values():
    net = Pools()
    spec = [InputSpec([None, 3, 11, 10], "float32", "x")]
    x = np.random.default_rng(3).standard_normal((2, 3, 11, 10)).astype("float32")
    model = px.compile(net, spec)
    got, want = model(x), [t.numpy() for t in net(paddle.to_tensor(x))]
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    windows = [
        e.params["window_dimensions"]
        for e in _live_eqns(model.compiled.jaxpr(x).jaxpr)
        if e.primitive.name.startswith("reduce_window")
    ]
    assert [max(w) for w in windows] == [5]


def test_training_keeps_max_pools_as_reduce_window():
    """A differentiated program keeps reduce_window: the shifted maxima's gradient would split ties."""
    import dataclasses

    import jax

    from paddle_xla.lowering.lower import lower
    from paddle_xla.lowering.policy import LoweringPolicy

    x = np.random.default_rng(3).standard_normal((2, 3, 11, 10)).astype("float32")
    graph = px.compile(Pools(), [InputSpec([None, 3, 11, 10], "float32", "x")]).graph
    # an inference policy in all but forward_only: HWIO filters alone must not bring the shifted form
    fn = lower(graph, dataclasses.replace(LoweringPolicy.tuned("cpu", inference=True), forward_only=False))
    jaxpr = jax.make_jaxpr(fn)({}, {}, {"x": x}).jaxpr
    assert len([e for e in _live_eqns(jaxpr) if e.primitive.name.startswith("reduce_window")]) == 7


# ---- bf16 convolutions by shifts: float32 in memory, bf16 values --------------------------------------
def test_half_values_by_shifts_equal_the_bf16_convolution_exactly():
    from functools import partial

    import jax.numpy as jnp

    from paddle_xla.lowering.kernels import _on_half_values
    from paddle_xla.ops.depthwise import depthwise_by_shifts, narrow_conv_by_shifts

    rng = np.random.default_rng(4)
    attrs = dict(strides=(2, 2), paddings=[1, 1], data_format="NHWC")
    for form, w_shape in ((depthwise_by_shifts, (3, 3, 1, 24)), (narrow_conv_by_shifts, (3, 3, 3, 16))):
        x = jnp.asarray(rng.standard_normal((2, 9, 9, 24 if w_shape[2] == 1 else 3)), jnp.float32)
        w = jnp.asarray(rng.standard_normal(w_shape), jnp.float32)
        got = _on_half_values(partial(form, hwio=True), x, w, half=jnp.bfloat16, **attrs)
        want = form(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), hwio=True, **attrs)
        assert got.dtype == want.dtype == jnp.bfloat16
        np.testing.assert_array_equal(np.asarray(got, "float32"), np.asarray(want, "float32"))


def test_bf16_mobilenet_matches_paddle():
    paddle.seed(0)
    net = paddle.vision.models.mobilenet_v3_small(scale=0.5)
    net.eval()
    x = np.random.default_rng(5).standard_normal((2, 3, 64, 64)).astype("float32")
    got = px.compile(net, [InputSpec([None, 3, 64, 64], "float32", "x")], strategy=px.Strategy(precision="bf16"))(x)
    want = net(paddle.to_tensor(x)).numpy()
    np.testing.assert_allclose(got, want, atol=3e-2 * np.abs(want).max())
