"""Models, batches and runners shared by the parallel tests: tiny, so 16 virtual CPU devices on
two cores compile and run them in seconds."""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn as nn
from paddle.static import InputSpec
from test_training import MLP, BertClassifier, SmallCNN
from zoo import BertLikeEncoder

import paddle_xla as px

LABEL = [InputSpec([None], "int64", "label")]


def loss_fn():
    return nn.CrossEntropyLoss()


def setup(kind: str):
    """(net, optimizer, input specs) with fixed weights."""
    paddle.seed(7)
    if kind == "mlp":
        net = MLP()
        opt = paddle.optimizer.Lamb(
            3e-3, parameters=net.parameters(), lamb_weight_decay=0.01, grad_clip=nn.ClipGradByGlobalNorm(0.5)
        )
        return net, opt, [InputSpec([None, 16], "float32", "x")]
    if kind == "cnn":
        net = SmallCNN()
        opt = paddle.optimizer.Momentum(
            0.05,
            momentum=0.9,
            parameters=net.parameters(),
            use_nesterov=True,
            weight_decay=paddle.regularizer.L2Decay(1e-4),
        )
        return net, opt, [InputSpec([None, 3, 8, 8], "float32", "x")]
    net = BertClassifier()
    # NOTE: momentum, not Adam/Lamb: the attention's key bias has an exactly-zero gradient, and Adam-like
    # rules turn its rounding noise into full-size steps, so its weights differ between any two
    # reduction orders; momentum keeps noise as noise.
    opt = paddle.optimizer.Momentum(0.05, momentum=0.9, parameters=net.parameters())
    return net, opt, [InputSpec([None, None], "int64", n) for n in ("ids", "types", "mask")]


def batches(kind: str, n: int, batch: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        if kind == "mlp":
            out.append(([rng.standard_normal((batch, 16)).astype("float32")], [rng.integers(0, 4, (batch,))]))
        elif kind == "cnn":
            out.append(([rng.standard_normal((batch, 3, 8, 8)).astype("float32")], [rng.integers(0, 5, (batch,))]))
        else:
            ids, types, mask = BertLikeEncoder.inputs(batch=batch, seq=12, vocab=200, seed=int(rng.integers(1 << 30)))
            out.append(([ids, types, mask], [rng.integers(0, 3, (batch,))]))
    return out


def annotated_mlp(mesh):
    """setup("mlp") with Paddle's own annotations: l1 split by columns, l2 by rows over `mesh`."""
    import paddle.distributed as dist

    net, _, specs = setup("mlp")
    net.l1.weight = dist.shard_tensor(net.l1.weight, mesh, [dist.Shard(1)])
    net.l1.bias = dist.shard_tensor(net.l1.bias, mesh, [dist.Shard(0)])
    net.l2.weight = dist.shard_tensor(net.l2.weight, mesh, [dist.Shard(0)])
    opt = paddle.optimizer.Lamb(
        3e-3, parameters=net.parameters(), lamb_weight_decay=0.01, grad_clip=nn.ClipGradByGlobalNorm(0.5)
    )
    return net, opt, specs


def train(kind: str, strategy=None, steps: int = 3, batch: int = 16, verbose=False, build=None):
    """(per-step losses, {state_dict key: weight}, the TrainStep); `build` replaces setup(kind). Under
    several processes each feeds its rank's block of every global batch, as DistributedBatchSampler does."""
    net, opt, specs = build() if build is not None else setup(kind)
    step = px.train_step(net, loss_fn(), opt, specs, LABEL, strategy=strategy)
    losses = [step(*own_share(x), *own_share(y)) for x, y in batches(kind, steps, batch)]
    return losses, by_key(step), step


def own_share(arrays):
    """This process's block of each array's rows (all of them for one process)."""
    import jax

    r, n = jax.process_index(), jax.process_count()
    return [a[r * len(a) // n : (r + 1) * len(a) // n] for a in arrays]


def by_key(step) -> dict[str, np.ndarray]:
    # NOTE: Paddle numbers weight names per process (linear_3.w_0 ...); state_dict keys are stable.
    return {step.captured.state_keys[k].removeprefix("net."): np.asarray(v) for k, v in step.weights().items()}


def native(kind: str, groups: int, steps: int = 3, batch: int = 16):
    """Native Paddle eager, the batch split into `groups` equal parts whose gradients add up (each
    part's mean loss / groups): what a layout with replicas x micro_batches = groups computes."""
    net, opt, _ = setup(kind)
    net.train()
    ce = loss_fn()
    losses = []
    for x, y in batches(kind, steps, batch):
        total = 0.0
        for g in range(groups):
            part = slice(g * batch // groups, (g + 1) * batch // groups)
            out = net(*[paddle.to_tensor(a[part]) for a in x])
            loss = ce(out, paddle.to_tensor(y[0][part])) / groups
            loss.backward()
            total += float(loss)
        opt.step()
        opt.clear_grad()
        losses.append(total)
    return losses, {k: t.numpy() for k, t in net.state_dict().items()}


def assert_weights_close(got, want, rtol=1e-4, atol=1e-6, skip=()):
    assert set(got) == set(want)
    for k in want:
        if not any(s in k for s in skip):
            np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, err_msg=k)


# ---- the transformer models tensor parallelism and sharding split -------------------------------
def tensor_batches(kind: str, n: int, batch: int = 16, seed: int = 0):
    from parallel.tensor_models import SEQ

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = rng.integers(0, 256, (batch, SEQ)).astype("int64")
        if kind == "encoder":
            types = rng.integers(0, 2, (batch, SEQ)).astype("int64")
            mask = np.ones((batch, SEQ), "int64")
            mask[:, SEQ - 2 :] = 0
            out.append([ids, types, mask, rng.integers(0, 4, (batch,)).astype("int64")])
        else:
            out.append([ids, np.roll(ids, -1, axis=1)])
    return out


def train_tensor(kind: str, strategy=None, steps: int = 3, batch: int = 16):
    """(per-step losses, {state_dict key: weight}, the TrainStep) of a tensor_models model."""
    from parallel.tensor_models import setup as tsetup

    net, opt, specs, labels, loss = tsetup(kind)
    step = px.train_step(net, loss, opt, specs, labels, strategy=strategy)
    losses = [step(*b) for b in tensor_batches(kind, steps, batch)]
    return losses, by_key(step), step
