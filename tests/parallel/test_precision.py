"""Mixed precision: bf16 follows the fp32 loss curve; fp16 loss scaling skips overflowing steps."""

import numpy as np
import paddle
from zoo import BertLikeEncoder

import paddle_xla as px
from parallel.helpers import LABEL, batches, by_key, loss_fn, setup


def _curve(strategy, steps=50):
    net, _, specs = setup("bert")
    opt = paddle.optimizer.AdamW(1e-3, parameters=net.parameters())
    step = px.train_step(net, loss_fn(), opt, specs, LABEL, strategy=strategy)
    data = batches("bert", 5)
    return [step(*data[i % 5][0], *data[i % 5][1]) for i in range(steps)], step


def test_bf16_loss_curve_follows_fp32():
    fp32, _ = _curve(None)
    bf16, step = _curve(px.Strategy(precision="bf16"))
    np.testing.assert_allclose(bf16, fp32, rtol=2e-2)
    assert fp32[-1] < 0.7 * fp32[0]  # it did learn
    assert all(v.dtype == np.float32 for v in step.weights().values())  # float32 masters


def test_fp16_loss_scaling_skips_overflowing_steps():
    net, opt, specs = setup("mlp")
    # NOTE: a scale of 2^30 overflows float16 in the backward pass; it halves on each skipped step.
    scale = px.LossScale(init=2.0**30, growth_interval=3)
    step = px.train_step(net, loss_fn(), opt, specs, LABEL, strategy=px.Strategy(precision="fp16", loss_scale=scale))
    data = batches("mlp", 30)
    before = by_key(step)
    step(*data[0][0], *data[0][1])
    assert step.skipped_steps == 1 and step.loss_scale == 2.0**29
    for k, v in by_key(step).items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)  # a skipped step changes nothing
    scales = []
    for x, y in data[1:]:
        loss = step(*x, *y)
        scales.append(step.loss_scale)
    assert 1 < step.skipped_steps < 29 and np.isfinite(loss)
    assert min(scales) < 2.0**29  # lowered on overflow,
    assert any(b > a for a, b in zip(scales, scales[1:]))  # raised after 3 clean steps
    assert step.state.step == 30
    assert any(not np.array_equal(v, before[k]) for k, v in by_key(step).items())


def test_bf16_inference():
    paddle.seed(0)
    net = BertLikeEncoder(vocab=200, hidden=32, layers=2, heads=2, ffn=64, dropout=0.0)
    net.eval()
    x = BertLikeEncoder.inputs(batch=4, seq=12, vocab=200)
    want = px.compile(net, BertLikeEncoder.specs())(*x)
    got = px.compile(net, BertLikeEncoder.specs(), strategy=px.Strategy(precision="bf16"))(*x)
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=2e-2, atol=2e-2)


def test_bf16_inference_holds_only_matmul_weights_in_half():
    paddle.seed(0)
    net = BertLikeEncoder(vocab=200, hidden=32, layers=2, heads=2, ffn=64, dropout=0.0)
    net.eval()
    x = BertLikeEncoder.inputs(batch=4, seq=12, vocab=200)
    model = px.compile(net, BertLikeEncoder.specs(), strategy=px.Strategy(precision="bf16"))
    dtypes = {k: str(v.dtype) for k, v in model.compiled.params.items()}
    shapes = {k: v.shape for k, v in model.compiled.params.items()}
    half = {k for k, d in dtypes.items() if d == "bfloat16"}
    # every 2-D linear weight is read by matmul only; embeddings, norms and biases are read by other ops
    assert half and all(len(shapes[k]) == 2 for k in half)
    assert all(dtypes[k] == "float32" for k in dtypes if len(shapes[k]) == 1)
    assert any(dtypes[k] == "float32" for k in dtypes if "embedding" in k)
    want = [o.numpy() for o in net(*[paddle.to_tensor(v) for v in x])]
    for g, w in zip(model(*x), want):
        np.testing.assert_allclose(g, w, rtol=2e-2, atol=2e-2 * np.abs(w).max())


def _fp16_step():
    net, opt, specs = setup("mlp")
    scale = px.LossScale(init=2.0**30, growth_interval=3)
    return px.train_step(net, loss_fn(), opt, specs, LABEL, strategy=px.Strategy(precision="fp16", loss_scale=scale))


def test_fp16_checkpoint_keeps_the_loss_scaler(tmp_path):
    data = batches("mlp", 12)
    straight = _fp16_step()
    want = [straight(*x, *y) for x, y in data]
    first = _fp16_step()
    got = [first(*x, *y) for x, y in data[:6]]
    first.save_checkpoint(str(tmp_path / "ckpt"))
    assert first.skipped_steps >= 1
    resumed = _fp16_step()
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    assert (resumed.loss_scale, resumed.skipped_steps) == (first.loss_scale, first.skipped_steps)
    got += [resumed(*x, *y) for x, y in data[6:]]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert (resumed.loss_scale, resumed.skipped_steps) == (straight.loss_scale, straight.skipped_steps)


def _sgd_step(precision, lr, scale):
    """The mlp under plain SGD, in fp32 or in fp16 with a loss scale of `scale`."""
    net, _, specs = setup("mlp")
    opt = paddle.optimizer.SGD(lr, parameters=net.parameters())
    strategy = px.Strategy(precision="fp16", loss_scale=px.LossScale(init=scale)) if precision == "fp16" else None
    return px.train_step(net, loss_fn(), opt, specs, LABEL, strategy=strategy)


def test_fp16_loss_curve_follows_fp32():
    """With plain SGD (no clipping, no Adam-like normalisation, both of which hide a constant factor in
    the gradients), a loss scale left in the gradients would multiply every step by it."""
    curves = {}
    for precision in ("fp32", "fp16"):
        step = _sgd_step(precision, 0.1, 2.0**10)
        data = batches("mlp", 5)
        curves[precision] = [step(*data[i % 5][0], *data[i % 5][1]) for i in range(30)]
        if precision == "fp16":
            assert step.skipped_steps == 0 and step.loss_scale >= 2.0**10
    np.testing.assert_allclose(curves["fp16"], curves["fp32"], rtol=2e-2)
    assert curves["fp32"][-1] < 0.8 * curves["fp32"][0]  # it did learn


def test_fp16_unscaled_gradients_equal_fp32s():
    """One SGD step of lr 1 moves each weight by exactly its gradient: under fp16 with a loss scale of
    2^12 that move must equal fp32's within float16's rounding (a scale left in would be 4096x)."""
    moved = {}
    for precision in ("fp32", "fp16"):
        step = _sgd_step(precision, 1.0, 2.0**12)
        before = by_key(step)
        x, y = batches("mlp", 1)[0]
        step(*x, *y)
        moved[precision] = {k: before[k] - v for k, v in by_key(step).items()}
    for k, g32 in moved["fp32"].items():
        scale = np.abs(g32).max()
        assert scale > 0, k
        # NOTE: float16 keeps ~3 decimal digits of each product and sum; gradients of this size agree to ~1e-2
        np.testing.assert_allclose(moved["fp16"][k], g32, rtol=0, atol=2e-2 * scale, err_msg=k)
