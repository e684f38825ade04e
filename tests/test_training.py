"""Training parity: paddle_xla's train step against native Paddle, same weights, same batches."""

import jax
import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
import pytest
from paddle.static import InputSpec
from zoo import BertLikeEncoder

import paddle_xla as px


class MLP(nn.Layer):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.gelu(self.l1(x)))))


class SmallCNN(nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2D(3, 8, 3, padding=1), nn.BatchNorm2D(8)
        self.conv2, self.bn2 = nn.Conv2D(8, 16, 3, stride=2, padding=1), nn.BatchNorm2D(16)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


class BertClassifier(nn.Layer):
    def __init__(self):
        super().__init__()
        self.bert = BertLikeEncoder(vocab=200, hidden=32, layers=2, heads=2, ffn=64, dropout=0.0)
        self.head = nn.Linear(32, 3)

    def forward(self, ids, types, mask):
        _, pooled = self.bert(ids, types, mask)
        return self.head(pooled)


def _batches(kind, n, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        if kind == "mlp":
            yield [rng.standard_normal((8, 16)).astype("float32")], [rng.integers(0, 4, (8,)).astype("int64")]
        elif kind == "cnn":
            yield [rng.standard_normal((4, 3, 8, 8)).astype("float32")], [rng.integers(0, 5, (4,)).astype("int64")]
        else:
            ids, types, mask = BertLikeEncoder.inputs(batch=4, seq=12, vocab=200, seed=int(rng.integers(1 << 30)))
            yield [ids, types, mask], [rng.integers(0, 3, (4,)).astype("int64")]


def _setup(kind):
    paddle.seed(7)
    if kind == "mlp":
        net = MLP()
        sched = paddle.optimizer.lr.LinearWarmup(paddle.optimizer.lr.CosineAnnealingDecay(3e-3, 20), 5, 0.0, 3e-3)
        opt = paddle.optimizer.AdamW(
            sched, parameters=net.parameters(), weight_decay=0.01, grad_clip=nn.ClipGradByGlobalNorm(1.0)
        )
        specs = [InputSpec([None, 16], "float32", "x")]
    elif kind == "cnn":
        net = SmallCNN()
        sched = None
        opt = paddle.optimizer.Momentum(
            0.05,
            momentum=0.9,
            parameters=net.parameters(),
            use_nesterov=True,
            weight_decay=paddle.regularizer.L2Decay(1e-4),
        )
        specs = [InputSpec([None, 3, 8, 8], "float32", "x")]
    else:
        net = BertClassifier()
        sched = paddle.optimizer.lr.PolynomialDecay(5e-3, 20, end_lr=1e-4, power=2.0)
        opt = paddle.optimizer.Lamb(sched, parameters=net.parameters(), lamb_weight_decay=0.01)
        specs = BertLikeEncoder.specs()
        specs = [InputSpec([None, None], "int64", n) for n in ("ids", "types", "mask")]
    return net, opt, sched, specs


def _native_step(net, opt, sched, inputs, labels):
    out = net(*[paddle.to_tensor(x) for x in inputs])
    loss = F.cross_entropy(out, paddle.to_tensor(labels[0]))
    loss.backward()
    opt.step()
    opt.clear_grad()
    if sched is not None:
        sched.step()
    return float(loss)


@pytest.mark.parametrize("kind", ["mlp", "cnn", "bert"])
def test_training_matches_native_paddle(kind):
    net, opt, sched, specs = _setup(kind)
    net.train()
    step = px.train_step(net, nn.CrossEntropyLoss(), opt, specs, [InputSpec([None], "int64", "label")])
    ours, theirs = [], []
    for inputs, labels in _batches(kind, 22):
        ours.append(step(*inputs, *labels))
        theirs.append(_native_step(net, opt, sched, inputs, labels))
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)
    trained = step.weights()
    # NOTE: atol 1e-4: an attention key bias has an analytically zero gradient (softmax ignores a
    # per-query constant), so both frameworks update it from fp32 round-off noise, amplified by Lamb.
    for t in net.state_dict().values():
        np.testing.assert_allclose(trained[t.name], t.numpy(), rtol=1e-3, atol=1e-4, err_msg=t.name)


def test_resume_continues_the_same_curve(tmp_path):
    def fresh():
        net, opt, sched, specs = _setup("mlp")
        return px.train_step(net, nn.CrossEntropyLoss(), opt, specs, [InputSpec([None], "int64", "label")])

    batches = list(_batches("mlp", 20, seed=3))
    straight = fresh()
    curve = [straight(*i, *l) for i, l in batches]
    first = fresh()
    for i, l in batches[:10]:
        first(*i, *l)
    first.save_checkpoint(str(tmp_path / "ckpt"))
    del first
    resumed = fresh()
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    tail = [resumed(*i, *l) for i, l in batches[10:]]
    np.testing.assert_allclose(tail, curve[10:], rtol=1e-6)


def test_sync_to_writes_weights_back():
    net, opt, sched, specs = _setup("cnn")
    step = px.train_step(net, nn.CrossEntropyLoss(), opt, specs, [InputSpec([None], "int64", "label")])
    for inputs, labels in _batches("cnn", 2):
        step(*inputs, *labels)
    step.sync_to(net)
    w = step.weights()
    for t in net.state_dict().values():
        np.testing.assert_array_equal(t.numpy(), w[t.name])


def test_bad_label_shape_and_nonfinite_loss():
    net, opt, sched, specs = _setup("mlp")
    step = px.train_step(net, nn.CrossEntropyLoss(), opt, specs, [InputSpec([None], "int64", "label")])
    x = np.ones((8, 16), "float32")
    with pytest.raises(px.FeedError, match="'label' has rank 2"):
        step(x, np.zeros((8, 1), "int64"))
    before = step.weights()
    moments = jax.tree.map(lambda a: np.array(a, copy=True), step.state.opt_state)
    with pytest.raises(px.TrainingError, match="not finite at step 0"):
        step(np.full((8, 16), np.nan, "float32"), np.zeros((8,), "int64"))
    after = step.weights()
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])
    # AdamW's moments too: they are selected before the update reads them (optim._select_early).
    jax.tree.map(np.testing.assert_array_equal, moments, jax.tree.map(np.asarray, step.state.opt_state))


def test_checkpoint_errors(tmp_path):
    net, opt, sched, specs = _setup("mlp")
    step = px.train_step(net, nn.CrossEntropyLoss(), opt, specs, [InputSpec([None], "int64", "label")])
    path = str(tmp_path / "ckpt")
    step.save_checkpoint(path)
    data = open(path, "rb").read()
    open(path + ".cut", "wb").write(data[: len(data) // 2])
    with pytest.raises(px.CheckpointError, match="truncated or corrupt"):
        step.load_checkpoint(path + ".cut")
    cnet, copt, _, cspecs = _setup("cnn")
    other = px.train_step(cnet, nn.CrossEntropyLoss(), copt, cspecs, [InputSpec([None], "int64", "label")])
    with pytest.raises(px.CheckpointError, match="different model") as err:
        other.load_checkpoint(path)
    assert "l1.weight" in str(err.value) or "conv1.weight" in str(err.value)


class WithUnusedHead(nn.Layer):
    """A second head the loss never reads (a common leftover: an auxiliary or pre-training head)."""

    def __init__(self):
        super().__init__()
        self.body, self.head, self.unused = nn.Linear(16, 32), nn.Linear(32, 4), nn.Linear(32, 7)

    def forward(self, x):
        return self.head(F.relu(self.body(x)))


def test_parameters_the_loss_does_not_read_are_left_alone_as_in_paddle():
    paddle.seed(3)
    net = WithUnusedHead()
    opt = paddle.optimizer.AdamW(1e-2, parameters=net.parameters(), weight_decay=0.1)
    step = px.train_step(
        net, nn.CrossEntropyLoss(), opt, [InputSpec([None, 16], "float32", "x")], [InputSpec([None], "int64", "label")]
    )
    assert sorted(step.unused_params) == sorted(p.name for p in net.unused.parameters())
    before = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    for inputs, labels in _batches("mlp", 6):
        ours = step(*inputs, *labels)
        theirs = _native_step(net, opt, None, inputs, labels)
        np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    trained = step.weights()
    for key, t in net.state_dict().items():
        np.testing.assert_allclose(trained[t.name], t.numpy(), rtol=1e-5, atol=1e-6, err_msg=key)
    # AdamW's decoupled decay would have shrunk the unused weights had they been updated with zero grads
    np.testing.assert_array_equal(net.unused.weight.numpy(), before["unused.weight"])


def test_accumulated_gradients_match_paddle_backward_without_step():
    net, opt, sched, specs = _setup("mlp")
    step = px.train_step(net, nn.CrossEntropyLoss(), opt, specs, [InputSpec([None], "int64", "label")])
    data = list(_batches("mlp", 12))
    for i in range(0, 12, 3):
        ours = [
            step.accumulate(*data[i][0], *data[i][1]),
            step.accumulate(*data[i + 1][0], *data[i + 1][1]),
            step(*data[i + 2][0], *data[i + 2][1]),
        ]
        theirs = []
        for inputs, labels in data[i : i + 3]:  # Paddle: backward adds into .grad; one step at the end
            loss = F.cross_entropy(net(paddle.to_tensor(inputs[0])), paddle.to_tensor(labels[0]))
            loss.backward()
            theirs.append(float(loss))
        opt.step()
        opt.clear_grad()
        sched.step()
        np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    assert step.state.step == 4
    trained = step.weights()
    for key, t in net.state_dict().items():
        np.testing.assert_allclose(trained[t.name], t.numpy(), rtol=1e-4, atol=1e-6, err_msg=key)
