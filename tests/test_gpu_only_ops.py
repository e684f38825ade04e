"""PaddleFormers' default fused RMSNorm (fuse_rms_norm=True) on a CPU-only Paddle, which has no
fused_rms_norm_ext kernel: capture builds the model's unfused RMSNorm in its place
(capture/gpu_only_ops.py), so inference, training and generation equal the fuse_rms_norm=False twin
run by Paddle eager."""

import numpy as np
import paddle
import pytest
from generation.test_generator import MODELS, _model
from paddle import _C_ops
from paddle.static import InputSpec

import paddle_xla as px
from paddle_xla.api.generator import Generator
from paddle_xla.capture.gpu_only_ops import gpu_only_ops, missing_kernels

pytestmark = pytest.mark.skipif(paddle.is_compiled_with_cuda(), reason="Paddle's GPU build has the fused kernel")


def _twins(name):
    """(fused, unfused) copies of one tiny PaddleFormers model with the same weights."""
    fused, plain = _model(name), _model(name)
    fused.config.fuse_rms_norm = True
    for net in (fused, plain):
        net.config.use_cache = False  # NOTE: Qwen2's default returns its cache object (issue 30)
    plain.set_state_dict(fused.state_dict())
    return fused, plain


def _logits(out):
    return (out.logits if hasattr(out, "logits") else out[0]).numpy()


def test_paddle_has_no_cpu_kernel_for_the_fused_norm():
    # NOTE: what makes the replacement necessary; if a later CPU Paddle gains the kernel, this says so
    fused, _ = _twins("llama")
    with pytest.raises(RuntimeError, match="fused_rms_norm_ext"):
        fused(paddle.to_tensor(np.ones((1, 4), "int64")))
    assert "fused_rms_norm_ext" in missing_kernels()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_inference_equals_the_unfused_model(name):
    fused, plain = _twins(name)
    ids = np.random.default_rng(0).integers(3, 128, (2, 8))
    got = px.compile(fused, [InputSpec([2, 8], "int64", "input_ids")])(ids)
    got = np.asarray(got[0] if isinstance(got, (list, tuple)) else got)
    np.testing.assert_allclose(got, _logits(plain(paddle.to_tensor(ids))), rtol=1e-5, atol=1e-5)
    assert _C_ops.fused_rms_norm_ext is not None and _C_ops.fused_rms_norm_ext.__module__ != __name__


def test_training_equals_the_unfused_model_under_paddle():
    ids = np.random.default_rng(1).integers(3, 128, (2, 8)).astype("int64")
    labels = np.roll(ids, -1, axis=1)

    def loss_fn(logits, labels):
        return paddle.nn.functional.cross_entropy(logits.reshape([-1, logits.shape[-1]]), labels.reshape([-1]))

    def losses(use_px):
        fused, plain = _twins("llama")
        net = fused if use_px else plain
        net.train()
        opt = paddle.optimizer.AdamW(1e-3, parameters=net.parameters())
        if use_px:
            step = px.train_step(
                net, loss_fn, opt, [InputSpec([2, 8], "int64", "input_ids")], [InputSpec([2, 8], "int64", "labels")]
            )
            return [step(ids, labels) for _ in range(3)]
        out = []
        for _ in range(3):
            loss = loss_fn(_logits_tensor(net(paddle.to_tensor(ids))), paddle.to_tensor(labels))
            loss.backward()
            opt.step()
            opt.clear_grad()
            out.append(float(loss))
        return out

    np.testing.assert_allclose(losses(True), losses(False), rtol=1e-5)


def _logits_tensor(out):
    return out.logits if hasattr(out, "logits") else out[0]


def test_generation_equals_paddleformers_generate_of_the_unfused_model():
    fused, plain = _twins("llama")
    ids = np.random.default_rng(2).integers(3, 128, (2, 7))
    got, _ = Generator(fused, max_batch_size=2, max_length=24, chunk=4).generate(ids, max_new_tokens=6)
    want, _ = plain.generate(paddle.to_tensor(ids), max_new_tokens=6, decode_strategy="greedy_search")
    np.testing.assert_array_equal(got, want.numpy())


def test_the_replacement_is_scoped_and_reentrant():
    own = _C_ops.fused_rms_norm_ext
    with gpu_only_ops():
        inside = _C_ops.fused_rms_norm_ext
        with gpu_only_ops():
            assert _C_ops.fused_rms_norm_ext is inside
        assert _C_ops.fused_rms_norm_ext is inside and inside is not own
    assert _C_ops.fused_rms_norm_ext is own
