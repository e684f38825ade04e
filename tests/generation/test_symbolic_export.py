"""PaddleFormers causal LMs exported with symbolic batch and sequence dimensions: one artifact runs
every shape, with Paddle's logits."""

import numpy as np
import paddle
import pytest
from paddle.static import InputSpec

import paddle_xla as px
import paddle_xla.artifact as pxa

from .test_generator import MODELS, TINY, _model

SPEC = [InputSpec([None, None], "int64", "input_ids")]


def test_a_default_config_returning_its_cache_compiles_to_the_logits():
    net = _model("qwen2")
    assert net.config.use_cache  # Qwen2's default: its outputs hold a DynamicCache, left out of the program
    ids = np.random.default_rng(1).integers(0, TINY["vocab_size"], (2, 5)).astype("int64")
    with paddle.no_grad():
        want = net(paddle.to_tensor(ids), return_dict=True).logits.numpy()
    np.testing.assert_allclose(px.compile(net, SPEC)(ids), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_paddleformers_lm_exports_with_symbolic_batch_and_length(name, tmp_path):
    net = _model(name)
    path = str(tmp_path / f"{name}.pxa")
    manifest = px.export(px.compile(net, SPEC), path)
    assert manifest["exported"]["cpu"]["shapes"] == "symbolic"
    art = pxa.load(path)
    assert art.mode == "exported"
    rng = np.random.default_rng(0)
    for batch, length in [(2, 7), (3, 12), (1, 1)]:
        ids = rng.integers(0, TINY["vocab_size"], (batch, length)).astype("int64")
        with paddle.no_grad():
            want = net(paddle.to_tensor(ids), return_dict=True).logits.numpy()
        np.testing.assert_allclose(art(ids), want, rtol=1e-5, atol=1e-5)
