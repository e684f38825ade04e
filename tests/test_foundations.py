"""What a user may rely on: no process-wide JAX settings, the user's Layer left as it was, fresh
random numbers per call (reproducible from a seed), one lowering policy that an artifact records and
keeps (a bf16 model stays bf16; each platform tuned for itself), state that survives donation, and
clear errors where a guess would have been silent."""

import json
import os
import subprocess
import sys
import tempfile
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import paddle
import pytest
from paddle.static import InputSpec

import paddle_xla as px
from paddle_xla import x64
from paddle_xla.artifact import reader as artifact
from paddle_xla.errors import LoweringError, ModelLoadError, StrategyError, TrainingError
from paddle_xla.graph import Block, Graph, Op, Tensor
from paddle_xla.lowering.lower import lower
from paddle_xla.lowering.policy import LOWERING_VERSION, LoweringPolicy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- no process-wide side effects ------------------------------------------------------------------
_X64_SCRIPT = r"""
import jax, jax.numpy as jnp, numpy as np, paddle
from paddle.static import InputSpec
import paddle_xla as px

class Tok(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.emb = paddle.nn.Embedding(50, 4)
    def forward(self, ids):
        return self.emb(ids).sum(-1) + paddle.cast(ids, "float64").astype("float32")

paddle.seed(0)
net = Tok()
ids = np.array([[1, 7, 49]], "int64")
got = px.compile(net, [InputSpec([None, 3], "int64", "ids")])(ids)
assert np.allclose(got, net(paddle.to_tensor(ids)).numpy(), rtol=1e-6), got
assert not jax.config.jax_enable_x64, "paddle_xla turned x64 on for the process"
assert jnp.arange(3).dtype == jnp.int32 and jnp.asarray(1.0).dtype == jnp.float32
print("ok")
"""


def test_import_and_use_leave_jax_config_as_it_was(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PADDLE_XLA_CACHE="0")
    env.pop("JAX_ENABLE_X64", None)
    script = tmp_path / "x64_check.py"  # NOTE: a file: to_static reads the model's source
    script.write_text(_X64_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_a_jax_int32_array_feeds_an_int64_input():
    """A JAX user without x64 holds integers as int32; they widen exactly."""
    net = paddle.nn.Embedding(10, 2)
    model = px.compile(net, [InputSpec([None], "int64", "ids")])
    ids = jnp.asarray([1, 9, 3], dtype=jnp.int32)
    np.testing.assert_allclose(model(ids), net(paddle.to_tensor(np.array([1, 9, 3]))).numpy(), rtol=1e-6)


class Stateful(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc = paddle.nn.Linear(3, 3)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:
            y = y * 2.0
        return y


def test_compile_and_train_step_leave_the_layer_eager():
    net = Stateful()
    px.compile(net, [InputSpec([2, 3], "float32", "x")])
    spec = [InputSpec([2, 3], "float32", "x")]
    px.train_step(net, None, paddle.optimizer.SGD(0.1, parameters=net.parameters()), spec)
    assert "forward" not in net.__dict__ and net.forward.__func__ is Stateful.forward


# ---- randomness --------------------------------------------------------------------------------
class Noisy(paddle.nn.Layer):
    def forward(self, x):
        return x + paddle.rand([4, 8])


SPEC = [InputSpec([4, 8], "float32", "x")]
ZEROS = np.zeros((4, 8), "float32")


def test_each_call_draws_anew_and_a_seed_reproduces():
    a = px.compile(Noisy(), SPEC, seed=3)
    b = px.compile(Noisy(), SPEC, seed=3)
    first, second = a(ZEROS), a(ZEROS)
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(b(ZEROS), first)
    np.testing.assert_array_equal(b(ZEROS), second)
    assert not np.array_equal(px.compile(Noisy(), SPEC, seed=4)(ZEROS), first)


def test_an_artifact_draws_anew_per_call_from_the_exporters_key(tmp_path):
    path = str(tmp_path / "noisy.pxa")
    px.export(px.compile(Noisy(), SPEC, seed=3), path)
    want = px.compile(Noisy(), SPEC, seed=3)
    want = [want(ZEROS), want(ZEROS)]
    for prefer_graph in (False, True):
        art = artifact.load(path, prefer_graph=prefer_graph)
        got = [art(ZEROS), art(ZEROS)]
        assert not np.array_equal(got[0], got[1])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)
    seeded = [artifact.load(path, seed=11)(ZEROS) for _ in range(2)]
    np.testing.assert_array_equal(seeded[0], seeded[1])
    assert not np.array_equal(seeded[0], want[0])


# ---- one lowering policy, recorded ---------------------------------------------------------------
class TwoLayers(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = paddle.nn.Linear(64, 64), paddle.nn.Linear(64, 8)

    def forward(self, x):
        return self.l2(paddle.nn.functional.gelu(self.l1(x)))


def test_a_bf16_model_exports_and_reloads_as_bf16(tmp_path):
    paddle.seed(0)
    net = TwoLayers()
    spec = [InputSpec([None, 64], "float32", "x")]
    x = np.random.default_rng(0).standard_normal((16, 64)).astype("float32")
    bf16 = px.compile(net, spec, strategy=px.Strategy(precision="bf16"))
    fp32 = px.compile(net, spec)(x)
    want = bf16(x)
    assert np.abs(want - fp32).max() > 1e-3  # bf16 is visibly not fp32 here
    path = str(tmp_path / "bf16.pxa")
    manifest = px.export(bf16, path, platforms=["cpu", "cuda"])
    lowering = manifest["lowering"]
    assert lowering["version"] == LOWERING_VERSION and lowering["precision"] == "bf16"
    assert {p["precision"] for p in lowering["policies"].values()} == {"bf16"}
    with zipfile.ZipFile(path) as z:
        assert json.loads(z.read("strategy.json"))["precision"] == "bf16"
    for prefer_graph in (False, True):
        art = artifact.load(path, prefer_graph=prefer_graph)
        np.testing.assert_allclose(art(x), want, rtol=1e-5, atol=1e-5)


class Pointwise(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = paddle.nn.Conv2D(8, 16, 1)

    def forward(self, x):
        return self.conv(x)


def test_each_platform_is_exported_with_its_own_policy(tmp_path):
    """XLA:CPU's forms are the CPU executable's alone: channels-last activations and filters held as HWIO
    (XLA:CPU turns the 1x1 convolution into a GEMM itself); the CUDA one keeps Paddle's layouts for cuDNN."""
    path = str(tmp_path / "pw.pxa")
    manifest = px.export(
        px.compile(Pointwise(), [InputSpec([2, 8, 5, 5], "float32", "x")]), path, platforms=["cpu", "cuda"]
    )
    policies = manifest["lowering"]["policies"]
    assert policies["cpu"]["target"] == "cpu" and policies["cpu"]["channels_last"] and policies["cpu"]["hwio_filters"]
    assert policies["cuda"] == LoweringPolicy(target="cuda", forward_only=True).to_dict()
    _, members = artifact.read(path)
    text = {
        p: str(jax.export.deserialize(bytearray(members[f"exported/{p}.bin"])).mlir_module()) for p in ("cpu", "cuda")
    }
    assert "x[0, 1, i, o]->[b, 0, 1, f]" in text["cpu"]  # NHWC activations, HWIO filter
    assert "x[o, i, 0, 1]->[b, f, 0, 1]" in text["cuda"]  # Paddle's NCHW and OIHW


def test_a_relowered_artifact_says_when_its_lowering_version_moved(tmp_path):
    path = str(tmp_path / "old.pxa")
    px.export(px.compile(TwoLayers(), [InputSpec([2, 64], "float32", "x")]), path)
    old = str(tmp_path / "older.pxa")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(old, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "manifest.json":
                m = json.loads(data)
                m["lowering"]["version"] = LOWERING_VERSION - 1
                data = json.dumps(m).encode()
            dst.writestr(item, data)
    art = artifact.load(old, prefer_graph=True)
    assert f"lowering version {LOWERING_VERSION - 1}" in art.why
    assert "lowering version" not in artifact.load(path, prefer_graph=True).why


def _graph(op: Op, feeds) -> Graph:
    return Graph(block=Block((), (op,)), feeds=tuple(feeds), params=(), fetches=(Tensor("out", op.outputs[0], (), ""),))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_every_policy_reports_a_failing_lowering_with_its_layer_and_line(precision):
    op = Op(
        "pd_op.matmul",
        (0, 1),
        (2,),
        {"transpose_x": False, "transpose_y": False},
        scope="/Linear/",
        source="model.py:3 in forward",
    )
    graph = _graph(op, [Tensor("x", 0, (2, 3), "float32"), Tensor("y", 1, (4, 5), "float32")])
    fn = lower(graph, LoweringPolicy(precision=precision))
    with x64.scope(), pytest.raises(LoweringError, match=r"pd_op.matmul \(layer /Linear/\) failed.*\n.*model.py:3"):
        jax.jit(fn)({}, {}, {"x": np.ones((2, 3), "float32"), "y": np.ones((4, 5), "float32")})


def test_a_value_no_op_defines_is_a_lowering_error_naming_the_op():
    op = Op("pd_op.relu", (7,), (8,), {}, scope="/ReLU/", source="model.py:9 in forward")
    graph = _graph(op, [Tensor("x", 0, (2,), "float32")])
    with x64.scope(), pytest.raises(LoweringError, match=r"pd_op.relu \(layer /ReLU/\) failed: it reads value %7"):
        lower(graph)({}, {}, {"x": np.ones(2, "float32")})


# ---- donated state -------------------------------------------------------------------------------
class MeanOut(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.body = TwoLayers()

    def forward(self, x):
        return self.body(x).mean()


X4 = np.random.default_rng(1).standard_normal((4, 64)).astype("float32")


def test_set_weights_copies_what_a_train_step_will_donate():
    paddle.seed(0)
    net = MeanOut()
    step = px.train_step(
        net, None, paddle.optimizer.SGD(0.1, parameters=net.parameters()), [InputSpec([4, 64], "float32", "x")]
    )
    model = px.compile(net, [InputSpec([4, 64], "float32", "x")])
    step(X4)
    model.compiled.set_weights({**step.state.params, **step.state.buffers})
    want = model(X4)
    step(X4)  # donates the arrays set_weights was given
    np.testing.assert_array_equal(model(X4), want)


def test_a_stale_view_of_engine_state_says_so():
    paddle.seed(0)
    net = MeanOut()
    step = px.train_step(
        net,
        None,
        paddle.optimizer.SGD(0.1, parameters=net.parameters()),
        [InputSpec([4, 64], "float32", "x")],
        strategy=px.Strategy(micro_batches=2),
    )
    step(X4)
    old = step.state.params
    step(X4)
    with pytest.raises(TrainingError, match="before a later step"):
        old.natural()
    assert set(step.state.params.natural()) == set(old)


# ---- loss reduction ------------------------------------------------------------------------------
class Ratio(paddle.nn.Layer):
    """A loss the reader cannot classify: a sum divided by a count computed from the data."""

    def __init__(self):
        super().__init__()
        self.body = TwoLayers()

    def forward(self, x):
        y = self.body(x)
        return y.sum() / (paddle.abs(x).sum() + 1.0)


def test_an_unreadable_loss_under_split_batches_asks_for_loss_reduction():
    opt = lambda n: paddle.optimizer.SGD(0.1, parameters=n.parameters())  # noqa: E731
    spec = [InputSpec([4, 64], "float32", "x")]
    net = Ratio()
    with pytest.raises(StrategyError, match=r"loss_reduction='mean'.*|pd_op.divide"):
        px.train_step(net, None, opt(net), spec, strategy=px.Strategy(micro_batches=2))
    px.train_step(net, None, opt(net), spec)  # one group: nothing to combine
    step = px.train_step(net, None, opt(net), spec, strategy=px.Strategy(micro_batches=2, loss_reduction="sum"))
    assert np.isfinite(step(X4))


def test_common_losses_read_as_paddle_reduces_them():
    from paddle_xla import capture
    from paddle_xla.capture.wrap import net_with_loss
    from paddle_xla.train.reduction import loss_reduction

    nn, F = paddle.nn, paddle.nn.functional
    label = {"int": InputSpec([None], "int64", "y"), "float": InputSpec([None, 3], "float32", "y")}
    cases = [
        (nn.CrossEntropyLoss(), "int", "mean"),
        (nn.CrossEntropyLoss(reduction="sum"), "int", "sum"),
        (nn.MSELoss(), "float", "mean"),
        (nn.L1Loss(), "float", "mean"),
        (nn.BCEWithLogitsLoss(), "float", "mean"),
        (lambda o, y: F.nll_loss(F.log_softmax(o), y), "int", "mean"),
        (nn.SmoothL1Loss(), "float", "mean"),
        (lambda o, y: F.mse_loss(o, y) + 0.1 * (o * o).mean(), "float", "mean"),
        (nn.CrossEntropyLoss(ignore_index=0), "int", None),
        (nn.MSELoss(reduction="none"), "float", "sum"),
    ]
    net = nn.Linear(4, 3)
    for loss_fn, kind, want in cases:
        wrapped = net_with_loss(net, loss_fn, ["x"], ["y"])
        graph = capture.from_layer(wrapped, [InputSpec([None, 4], "float32", "x"), label[kind]], training=True).graph
        assert loss_reduction(graph)[0] == want, (loss_fn, want)


# ---- formats and safety --------------------------------------------------------------------------
def _graph_json(version, extra_field=False):
    op = {
        "name": "pd_op.relu",
        "inputs": [0],
        "outputs": [1],
        "attrs": {},
        "scope": "",
        "source": "",
        "blocks": [],
        "index": 1,
        **({"added_later": 1} if extra_field else {}),
    }
    tensor = {"name": "x", "value": 0, "shape": [2], "dtype": "float32", **({"added_later": 1} if extra_field else {})}
    graph = {
        "block": {"args": [], "ops": [op]},
        "feeds": [tensor],
        "params": [],
        "fetches": [{"name": "y", "value": 1, "shape": [2], "dtype": "float32"}],
        "buffer_updates": [],
    }
    return json.dumps({"format_version": version, "graph": graph})


def test_graph_format_reads_any_minor_and_refuses_a_newer_major():
    for version, extra in ((1, False), ("1.0", False), ("1.7", True)):
        assert Graph.from_json(_graph_json(version, extra)).feeds[0].shape == (2,)
    with pytest.raises(ModelLoadError, match=r"format version 2.0, written by a newer paddle_xla.*Upgrade"):
        Graph.from_json(_graph_json("2.0"))
    with pytest.raises(ModelLoadError, match="no readable format version"):
        Graph.from_json(_graph_json("one"))
    assert json.loads(Graph.from_json(_graph_json(1)).to_json())["format_version"] == "1.1"


def test_a_planted_wrapper_module_is_never_run(tmp_path):
    """Before, train_step imported <tmp>/paddle_xla_wrappers/net_with_loss_<sha1>.py if it existed."""
    import hashlib

    from paddle_xla.capture import wrap

    src = wrap._TEMPLATE.format(args="x", call="x", labels="")
    folder = os.path.join(tempfile.gettempdir(), "paddle_xla_wrappers")
    os.makedirs(folder, exist_ok=True)
    planted = os.path.join(folder, f"net_with_loss_{hashlib.sha1(src.encode()).hexdigest()[:12]}.py")
    marker = tmp_path / "ran"
    with open(planted, "w") as f:
        f.write(f"open({str(marker)!r}, 'w').write('planted code ran')\nraise SystemExit('planted')\n")
    try:
        net = MeanOut()
        step = px.train_step(
            net, None, paddle.optimizer.SGD(0.1, parameters=net.parameters()), [InputSpec([4, 64], "float32", "x")]
        )
        assert np.isfinite(step(X4))
        assert not marker.exists()
    finally:
        os.remove(planted)


def test_labels_without_a_loss_fn_need_a_model_that_takes_them():
    """loss_fn=None with label specs means the model computes its loss from them (PaddleFormers'
    model(input_ids, labels=labels)); a forward without such an argument is refused, not trained on its
    first output with the labels unread."""
    net = MeanOut()
    with pytest.raises(px.TrainingError, match=r"forward takes no argument named 'label'.*Pass a loss_fn"):
        px.train_step(
            net,
            None,
            paddle.optimizer.SGD(0.1, parameters=net.parameters()),
            [InputSpec([4, 64], "float32", "x")],
            [InputSpec([4], "int64", "label")],
        )


class OwnLoss(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc = paddle.nn.Linear(64, 3)

    def forward(self, x, labels=None):
        logits = self.fc(x)
        return paddle.nn.functional.cross_entropy(logits, labels), logits


def test_labels_without_a_loss_fn_go_to_the_model_by_name():
    x, y = np.random.default_rng(0).standard_normal((4, 64)).astype("float32"), np.array([0, 2, 1, 2])
    paddle.seed(3)
    net = OwnLoss()
    step = px.train_step(
        net,
        None,
        paddle.optimizer.SGD(0.1, parameters=net.parameters()),
        [InputSpec([4, 64], "float32", "x")],
        [InputSpec([4], "int64", "labels")],
    )
    paddle.seed(3)
    ref = OwnLoss()
    want = float(ref(paddle.to_tensor(x), labels=paddle.to_tensor(y))[0])
    np.testing.assert_allclose(step(x, y), want, rtol=1e-6)
