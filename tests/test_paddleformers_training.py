"""PaddleFormers causal LMs trained through their own loss, as their users train them:
px.train_step(model, None, opt, [input_ids], [labels]) calls model(input_ids, labels=labels), whose
criterion ignores -100 labels. Losses and final weights equal Paddle eager running the same calls, with
the model's default use_cache (Qwen2's True), on one device and under tensor and sharding layouts."""

import numpy as np
import paddle
import pytest
from generation.test_generator import MODELS, _model
from paddle.static import InputSpec

import paddle_xla as px

STEPS = 4
LR = 1e-3
SPECS = [InputSpec([None, 8], "int64", "input_ids")], [InputSpec([None, 8], "int64", "labels")]


def _batches():
    rng = np.random.default_rng(5)
    out = []
    for _ in range(STEPS):
        ids = rng.integers(3, 128, (4, 8)).astype("int64")
        labels = np.roll(ids, -1, axis=1)
        labels[0, :3] = -100  # NOTE: a prompt whose tokens carry no loss
        labels[:, -1] = -100  # NOTE: nothing to predict after the last token
        out.append((ids, labels))
    return out


def _optimizer(net):
    return paddle.optimizer.AdamW(
        LR, parameters=net.parameters(), weight_decay=0.01, grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0)
    )


def _eager(name, groups=1):
    """Paddle eager; with groups > 1 as Paddle's data parallelism computes it: each group's own loss (a
    mean over its valid tokens), the gradients averaged over groups."""
    net = _model(name)
    net.train()
    opt = _optimizer(net)
    losses = []
    for ids, labels in _batches():
        total = 0.0
        for part in np.split(np.arange(len(ids)), groups):
            out = net(paddle.to_tensor(ids[part]), labels=paddle.to_tensor(labels[part]))
            loss = (out[0] if isinstance(out, (tuple, list)) else out.loss) / groups
            loss.backward()
            total += float(loss)
        opt.step()
        opt.clear_grad()
        losses.append(total)
    return losses, {k: v.numpy() for k, v in net.state_dict().items()}


def _xla(name, strategy=None):
    net = _model(name)
    net.train()
    step = px.train_step(net, None, _optimizer(net), *SPECS, strategy=strategy)
    losses = [step(ids, labels) for ids, labels in _batches()]
    keys = step.captured.state_keys
    # NOTE: weights outside the state_dict (a rotary table held as a constant) have no key to compare by
    return losses, {keys[k].removeprefix("net."): np.asarray(v) for k, v in step.weights().items() if k in keys}


def _assert_same(got, want):
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5)
    assert set(got[1]) <= set(want[1])
    for k, w in want[1].items():
        if k not in got[1]:
            # NOTE: a tied weight (ERNIE's embedding and LM head) is one parameter under two keys
            assert any(np.array_equal(w, want[1][j]) for j in got[1]), k
            continue
        _assert_weights_close(got[1][k], w, k)


def _assert_weights_close(got, want, key):
    """Within float32 training noise, allowing AdamW's knife edge: where an element's gradient is near 0 its
    update lr * m / (sqrt(v) + eps) swings by up to lr per step on a rounding difference (seen on one element
    of 8192 on an AMD CPU, 5e-5 off). A wrong gradient moves far more elements than 0.1 %."""
    off = ~np.isclose(got, want, rtol=2e-3, atol=2e-5)
    assert off.sum() <= max(1, off.size // 1000), (
        f"{key}: {off.sum()} of {off.size} elements off, e.g. {got[off][:3]} vs {want[off][:3]}"
    )
    np.testing.assert_allclose(got, want, rtol=0, atol=2 * LR * STEPS, err_msg=key)


@pytest.fixture(scope="module", params=sorted(MODELS))
def eager(request):
    return request.param, _eager(request.param)


def test_own_loss_on_one_device(eager):
    name, want = eager
    if name == "qwen2":
        assert _model(name).config.use_cache  # NOTE: trained with its default, the cache object left out
    _assert_same(_xla(name), want)


def test_own_loss_under_tensor_parallelism(eager):
    name, want = eager
    _assert_same(_xla(name, px.Strategy(tensor=2, tensor_plan="auto")), want)


def test_own_loss_under_replicas_tensor_and_sharding(eager):
    """Each replica's loss is a mean over its own valid tokens, which differ in number (-100 labels), so the
    reference is Paddle's data parallelism over the same halves; paddle_xla asks which reduction is meant
    (a token mean is neither a plain mean nor a sum over the batch)."""
    name, _ = eager
    with pytest.raises(px.StrategyError, match="loss_reduction='mean'"):
        _xla(name, px.Strategy(replicas=2, tensor=2, sharding=3))
    _assert_same(
        _xla(name, px.Strategy(replicas=2, tensor=2, sharding=3, loss_reduction="mean")), _eager(name, groups=2)
    )


# ---- weights against a float64 reference --------------------------------------------------------
# NOTE: issue 30 saw Llama's final weights differ from Paddle's by 10-25x more than Paddle differs from
# itself with the batch split in two. That control moves only the batch reduction's rounding; XLA
# orders and fuses every op differently, and AdamW's first steps (m / sqrt(v), near +-lr for any
# gradient) turn each rounding difference into a weight difference. The fair yardstick is float64:
# both float32 runs are equally far from it when the gap is rounding; a wrong rule (a 1 % learning
# rate error) would put paddle_xla 100x further. Measured 2026-12-05 (5 AdamW steps, own loss, max over
# tensors of max|diff| / max|w|): Paddle's own float64 run is 6.3x (seed 2, 2x8) and 100x (seed 3, 4x16)
# that control away from Paddle's float32 weights, so an exact computation would miss a 3x-of-control
# bound too; at seed 3 the whole gap is one down_proj element of 8192 (float64 0.171736, Paddle 0.171781,
# paddle_xla 0.171650), the rest of that tensor within 4e-7 and of all 82240 elements the next 1.3e-5.


def _update_error(got, want, init):
    """max over weights of |got - want| / |want - init| (Frobenius): the error relative to what training moved."""
    return max(
        float(np.linalg.norm(got[k] - want[k]) / (np.linalg.norm(want[k] - init[k]) + 1e-12)) for k in got if k in want
    )


def _ce(logits, labels):
    return paddle.nn.functional.cross_entropy(logits.reshape([-1, logits.shape[-1]]), labels.reshape([-1]))


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # NOTE: the float64 copy's mask constant
@pytest.mark.parametrize("seed,batch,length", [(1, 2, 8), (3, 4, 16)])
def test_llama_weights_are_as_close_to_float64_as_paddles(seed, batch, length):
    rng = np.random.default_rng(seed)
    data = [rng.integers(3, 128, (batch, length)).astype("int64") for _ in range(5)]
    data = [(ids, np.roll(ids, -1, axis=1)) for ids in data]

    def eager(dtype):
        net = _model("llama")
        net.config.use_cache = False
        if dtype == "float64":
            net.to(dtype="float64")
        net.train()
        opt = paddle.optimizer.AdamW(1e-3, parameters=net.parameters())
        for ids, labels in data:
            out = net(paddle.to_tensor(ids))
            _ce(out[0] if isinstance(out, (tuple, list)) else out.logits, paddle.to_tensor(labels)).backward()
            opt.step()
            opt.clear_grad()
        return {k: v.numpy().astype("float64") for k, v in net.state_dict().items()}

    net = _model("llama")
    net.config.use_cache = False
    net.train()
    init = {k: v.numpy().astype("float64") for k, v in net.state_dict().items()}
    step = px.train_step(
        net,
        _ce,
        paddle.optimizer.AdamW(1e-3, parameters=net.parameters()),
        [InputSpec([batch, length], "int64", "input_ids")],
        [InputSpec([batch, length], "int64", "labels")],
    )
    for ids, labels in data:
        step(ids, labels)
    keys = step.captured.state_keys
    ours = {
        keys[k].removeprefix("net."): np.asarray(v).astype("float64") for k, v in step.weights().items() if k in keys
    }
    reference, paddles = eager("float64"), eager("float32")
    theirs = _update_error(paddles, reference, init)
    assert theirs < 1e-3  # NOTE: float32 rounding, not a different computation
    assert _update_error(ours, reference, init) <= 3 * theirs
