"""Model parity: the zoo's models in eval mode give Paddle's outputs on the same weights."""

import numpy as np
import paddle
import pytest
from zoo import ZOO, build

import paddle_xla as px


@pytest.mark.parametrize("name", ZOO)
def test_eval_parity(name):
    net, specs, inputs = build(name)
    net.eval()
    assert px.check(net, specs).ok  # NOTE: what check passes compiles (below)
    want = net(*[paddle.to_tensor(x) for x in inputs])
    want = [w.numpy() for w in (want if isinstance(want, (list, tuple)) else [want])]
    model = px.compile(net, specs)
    got = model(*inputs)
    got = got if isinstance(got, list) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_parity(g, w)


def assert_parity(got, want, rtol=1e-4):
    """Within rtol of Paddle, elementwise; elements far below the output's scale (ResNet-50's logits
    reach ~1e3) are held to rtol x 0.1 x the largest |output| instead, where fp32 summation order
    alone moves them."""
    np.testing.assert_allclose(got, want, rtol=rtol, atol=max(1e-5, rtol * 0.1 * float(np.abs(want).max())))


def test_paddle_tensors_in_paddle_tensors_out():
    net, specs, inputs = build("bert")
    net.eval()
    model = px.compile(net, specs)
    outs = model(*[paddle.to_tensor(x) for x in inputs])
    assert all(isinstance(o, paddle.Tensor) for o in outs)


def test_saved_inference_model_runs_without_its_class(tmp_path):
    net, specs, inputs = build("gpt")
    net.eval()
    prefix = str(tmp_path / "gpt")
    paddle.jit.save(net, prefix, input_spec=specs)
    want = net(paddle.to_tensor(inputs[0])).numpy()
    got = px.load_inference_model(prefix)(inputs[0])
    assert_parity(got, want)


def test_static_program():
    paddle.enable_static()
    try:
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [None, 6], "float32")
            h = paddle.nn.functional.relu(paddle.static.nn.fc(x, 5))
            out = paddle.nn.functional.softmax(h)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        xs = np.random.default_rng(0).standard_normal((3, 6)).astype("float32")
        (want,) = exe.run(main, feed={"x": xs}, fetch_list=[out])
        from paddle_xla import capture
        from paddle_xla.runtime.compiled import CompiledModel

        cap = capture.from_program(main, ["x"], [out])
        got = CompiledModel(cap.graph, cap.weights)(xs)
    finally:
        paddle.disable_static()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_graph_round_trips_through_disk(tmp_path):
    from paddle_xla import capture
    from paddle_xla import graph as graph_mod
    from paddle_xla.runtime.compiled import CompiledModel

    net, specs, inputs = build("functional")
    net.eval()
    cap = capture.from_layer(net, specs)
    graph_mod.save(str(tmp_path / "g"), cap.graph, cap.weights)
    g2, w2 = graph_mod.load(str(tmp_path / "g"))
    assert g2 == cap.graph
    np.testing.assert_array_equal(CompiledModel(g2, w2)(*inputs), CompiledModel(cap.graph, cap.weights)(*inputs))


def test_paddle_audio_log_mel_matches_paddle():
    from paddle.audio.features import LogMelSpectrogram
    from paddle.static import InputSpec

    paddle.seed(0)
    net = LogMelSpectrogram(sr=16000, n_fft=512, hop_length=160, n_mels=40, f_min=50.0, top_db=80.0)
    net.eval()
    model = px.compile(net, [InputSpec([None, 8000], "float32", "audio")])
    x = np.random.default_rng(0).standard_normal((2, 8000)).astype("float32")
    want = net(paddle.to_tensor(x)).numpy()
    np.testing.assert_allclose(model(x), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_llama_trains_as_paddle():
    """The Llama of paddle_xla.models (RMSNorm, rotary embeddings, SwiGLU), tiny: the forward and two
    AdamW steps against Paddle."""
    from paddle_xla.models.llama import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig.named("tiny")
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, (2, 8)).astype("int64")
    labels = np.roll(ids, -1, axis=1)

    def losses(use_px):
        paddle.seed(5)
        net = LlamaForCausalLM(cfg)
        opt = paddle.optimizer.AdamW(1e-3, parameters=net.parameters())
        if use_px:
            step = px.train_step(net, None, opt, LlamaForCausalLM.input_spec(8))
            return [step(ids, labels) for _ in range(2)]
        out = []
        for _ in range(2):
            loss = net(paddle.to_tensor(ids), paddle.to_tensor(labels))
            loss.backward()
            opt.step()
            opt.clear_grad()
            out.append(float(loss))
        return out

    np.testing.assert_allclose(losses(True), losses(False), rtol=1e-5)
