"""Strategy(quant_type="weight_only_int8"): a generator's matmul weights held as Paddle's weight-only int8.

Paddle's CPU build has the quantiser (weight_quantize) but not weight_only_linear, so the numerics are checked
in two steps: the int8 values and scales equal Paddle's weight_quantize, and the generator's tokens equal
PaddleFormers' generate on the model whose weights are replaced by their dequantised values (q * scale),
which is what weight_only_linear computes with."""

import jax.numpy as jnp
import numpy as np
import paddle
import pytest
from paddle.nn.quant import weight_quantize

import paddle_xla as px
import paddle_xla.artifact as pxa
from paddle_xla.api.generator import Generator
from paddle_xla.errors import GenerationError, StrategyError
from paddle_xla.lowering.int8 import Int8Weight, quantize

from .test_generator import BATCH, SLOTS, _model, _paddle, _prompts

INT8 = "weight_only_int8"
HALF = {"bfloat16": "bf16", "float16": "fp16"}


def _paddles_int8(w: np.ndarray, dtype: str):
    """Paddle's weight_quantize(weight_only_int8) as row-major [in, out] int8 and float32 scales. arch=70 is
    its one plain layout: the values row-major, +128, and the middle two of every four swapped."""
    q, scale = weight_quantize(paddle.to_tensor(w).astype(dtype), algo=INT8, arch=70)
    raw = q.numpy().reshape(-1, 4)[:, [0, 2, 1, 3]].reshape(-1)
    return (raw.astype(np.int16) - 128).astype(np.int8).reshape(w.shape), scale.astype("float32").numpy()


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_values_and_scales_equal_paddles_weight_quantize(dtype):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 96)).astype(np.float32)
    w[:, 3] = 0.0  # an all-zero channel
    w[5, 7] = 40.0  # an outlier sets its channel's scale
    want_q, want_scale = _paddles_int8(w, dtype)
    got = quantize(w, jnp.dtype(dtype))
    np.testing.assert_array_equal(np.asarray(got.q), want_q)
    np.testing.assert_array_equal(np.asarray(got.scale, np.float32), want_scale)


def _dequantised(net, gen):
    """The model's state with every int8-held weight replaced by q * scale (float32); returns the originals."""
    saved = {}
    for k, v in net.state_dict().items():
        if v.name in gen.held.int8:
            saved[k] = v.numpy().copy()
            w = gen.held.prepared(v.name, saved[k])
            v.set_value(np.asarray(w.q, np.float32) * np.asarray(w.scale, np.float32))
    return saved


def _restore(net, saved):
    state = net.state_dict()
    for k, value in saved.items():
        state[k].set_value(value)


@pytest.fixture(scope="module")
def llama():
    return _model("llama")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_tokens_equal_paddleformers_on_the_dequantised_weights(llama, precision):
    gen = Generator(
        llama,
        max_batch_size=BATCH,
        max_length=SLOTS,
        chunk=4,
        strategy=px.Strategy(precision=precision, quant_type=INT8),
    )
    held = gen.engine._device_params()
    int8 = {k for k, v in held.items() if isinstance(v, Int8Weight)}
    assert int8 == gen.held.int8 and len(int8) == 14  # q, k, v, o, gate, up, down per layer
    assert all(held[k].q.dtype == np.int8 and held[k].scale.shape == held[k].q.shape[1:] for k in int8)
    ids, mask = _prompts([7, 3, 5], 7)
    got, scores = gen.generate(ids, attention_mask=mask, max_new_tokens=10)
    plain, plain_scores = _paddle(llama, ids, mask, max_new_tokens=10, decode_strategy="greedy_search")
    saved = _dequantised(llama, gen)
    try:
        want, want_scores = _paddle(llama, ids, mask, max_new_tokens=10, decode_strategy="greedy_search")
    finally:
        _restore(llama, saved)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(scores, want_scores, atol=1e-5 if precision == "fp32" else 2e-2)
    assert not np.allclose(want_scores, plain_scores, atol=1e-6)  # the quantisation did move the numbers


def test_an_int8_artifact_reloads_with_the_live_tokens(llama, tmp_path):
    gen = Generator(
        llama, max_batch_size=BATCH, max_length=SLOTS, chunk=4, strategy=px.Strategy(precision="bf16", quant_type=INT8)
    )
    manifest = px.export(gen, str(tmp_path / "int8.pxa"))
    assert manifest["exported"]["cpu"]["int8_weights"] == sorted(gen.held.int8)
    ids, mask = _prompts([6, 2], 6, seed=4)
    want = gen.generate(ids, attention_mask=mask, max_new_tokens=8)
    for prefer_graph in (False, True):
        art = pxa.load(str(tmp_path / "int8.pxa"), prefer_graph=prefer_graph)
        assert art.geometry.quant_type == INT8
        got = art.generate(ids, attention_mask=mask, max_new_tokens=8)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    # NOTE: a server sizes it (its start-up line, plan-serving): an int8 weight is its values and its scales
    int8 = sorted(gen.held.int8)[0]
    held = art.paged().weight_bytes
    assert held < sum(np.asarray(w).nbytes for w in gen.source_weights.values()) and held > 0, held
    assert art.paged()._weights[int8].q.dtype == np.int8


def test_quant_type_errors_name_the_fix(llama):
    with pytest.raises(StrategyError, match="quant_type must be None or one of .*weight_only_int8"):
        px.Strategy(quant_type="weight_only_int4")
    with pytest.raises(GenerationError, match="tensor=2 is not supported yet"):
        Generator(llama, max_batch_size=2, max_length=16, strategy=px.Strategy(tensor=2, quant_type=INT8))
    with pytest.raises(StrategyError, match="applies to px.Generator only"):
        px.compile(
            paddle.nn.Linear(4, 4), [paddle.static.InputSpec([1, 4], "float32")], strategy=px.Strategy(quant_type=INT8)
        )
