"""Context parallelism, Strategy(sequence=N): each sequence split over N devices, alone and composed with
replicas, tensor and sharding, reproduces one device (16 virtual CPU devices), and each device holds a
part of the activations (XLA's memory_analysis of the compiled step), so a longer sequence trains.

The model is PaddleFormers' Llama, trained through its own loss (a mean over the valid tokens), so the
reference is one device with as many micro-batches as the layout has groups, each group's mean averaged.
SGD, whose update is the gradient itself (AdamW's first steps move every element by about lr whatever
its gradient, so an element whose gradient is near zero shows rounding as a whole step)."""

import re

import numpy as np
import paddle
import pytest
from generation.paddleformers import module
from paddle.static import InputSpec

import paddle_xla as px
from paddle_xla.errors import StrategyError
from paddle_xla.parallel.engine import compiled_step, memory_analysis

SEQ, BATCH, STEPS = 32, 4, 3
CONFIG = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    fuse_rms_norm=False,
)


def _step(strategy, seq=SEQ, batch=None):
    llama = module("transformers.llama")
    with paddle.utils.unique_name.guard():
        paddle.seed(0)
        net = llama.LlamaForCausalLM(llama.LlamaConfig(**CONFIG, max_position_embeddings=seq))
        net.train()
        opt = paddle.optimizer.SGD(0.5, parameters=net.parameters(), grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0))
        specs = [InputSpec([batch, seq], "int64", "input_ids")], [InputSpec([batch, seq], "int64", "labels")]
        return px.train_step(net, None, opt, *specs, strategy=strategy)


def _train(strategy, batch=None):
    step = _step(strategy, batch=batch)
    start = step.weights()
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(STEPS):
        ids = rng.integers(3, CONFIG["vocab_size"], (BATCH, SEQ)).astype("int64")
        labels = np.roll(ids, -1, 1)
        labels[:, -1] = -100
        labels[0, :5] = -100
        losses.append(step(ids, labels))
    # NOTE: by state_dict key; a constant outside the state_dict (the rotary table) has a per-process name
    keys = step.captured.state_keys
    return losses, {keys[k]: v - start[k] for k, v in step.weights().items() if k in keys}, step


@pytest.fixture(scope="module")
def one_device():
    cache = {}

    def get(groups):
        if groups not in cache:
            st = None if groups == 1 else px.Strategy(micro_batches=groups, loss_reduction="mean")
            cache[groups] = _train(st)[:2]
        return cache[groups]

    return get


@pytest.mark.parametrize(
    "layout",
    [
        dict(sequence=4),
        dict(sequence=2, tensor=2, tensor_plan="auto"),
        dict(replicas=2, sequence=4, sharding=3),
        dict(replicas=2, sequence=2, tensor=2, tensor_plan="auto", sharding=2),
    ],
)
def test_sequence_split_matches_one_device(layout, one_device):
    strategy = px.Strategy(**layout, loss_reduction="mean")
    losses, updates, step = _train(strategy)
    want_losses, want_updates = one_device(strategy.groups)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    assert set(updates) == set(want_updates)
    worst = {k: float(np.max(np.abs(updates[k] - w)) / np.max(np.abs(w))) for k, w in want_updates.items()}
    # NOTE: a norm weight's gradient sums over every token with cancellation; split over devices the partial
    # sums add in another order (measured up to 3e-5 of the update). A wrong split would be off by 1e-2 or more.
    assert max(worst.values()) < 1e-4, worst


def _temp_bytes(strategy, seq):
    step = _step(strategy, seq)
    ids = np.zeros((1, 2, seq), "int64")
    s = step.state
    return memory_analysis(step._step.engine, s.params, s.buffers, s.opt_state, {"input_ids": ids, "labels": ids})[
        "temp_bytes"
    ]


@pytest.mark.slow
def test_each_device_holds_a_part_of_the_activations():
    """At sequence 512, the ring over four devices holds under a tenth of one device's temporaries (scores
    [sequence / 4, sequence / 4] at a time, recomputed in the backward pass), under half of what gathering
    the keys and values holds ([sequence / 4, sequence] scores per layer), and a sequence twice as long
    over four devices needs less per device than one device needs for the shorter one."""
    one = _temp_bytes(px.Strategy(loss_reduction="mean"), 512)
    ring = _temp_bytes(px.Strategy(sequence=4, loss_reduction="mean"), 512)
    gather = _temp_bytes(px.Strategy(sequence=4, sequence_attention="gather", loss_reduction="mean"), 512)
    longer = _temp_bytes(px.Strategy(sequence=4, loss_reduction="mean"), 1024)
    assert ring < one / 10, (ring, one)
    assert ring < gather / 2, (ring, gather)
    assert gather < one / 3, (gather, one)
    assert longer < one / 4, (longer, one)


def test_every_attention_goes_round_the_ring():
    """Each decoder layer's attention becomes one ring (a model whose attention were left as captured would
    still match one device, through the gathered keys: this is what says the ring ran)."""
    step = _step(px.Strategy(sequence=4, loss_reduction="mean"))
    graph = step._step.engine._attention_graph()
    names = [op.name for op in graph.block.ops]
    assert names.count("paddle_xla.ring_attention") == CONFIG["num_hidden_layers"]
    assert "pd_op.softmax" not in names


@pytest.mark.parametrize("batch", [BATCH, None])
def test_grouped_keys_go_round_the_ring_unrepeated(batch, one_device):
    """The ring passes the keys and values before the model repeats its 2 key/value heads for 4 query heads
    (half the bytes), whether the repetition's shapes are constants (a fixed batch) or read from the keys'
    own shape (a batch fixed at call time, as the Trainer captures): one device's numbers still."""
    losses, updates, step = _train(px.Strategy(sequence=4, loss_reduction="mean"), batch=batch)
    graph = step._step.engine._attention_graph()
    made = {v: op for op in graph.block.ops for v in op.outputs}
    rings = [op for op in graph.block.ops if op.name == "paddle_xla.ring_attention"]
    assert rings and all(made[kv].name != "pd_op.reshape" for op in rings for kv in op.inputs[1:3])
    want_losses, want_updates = one_device(1)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    worst = max(float(np.max(np.abs(updates[k] - w)) / np.max(np.abs(w))) for k, w in want_updates.items())
    assert worst < 1e-4


def test_ring_and_gather_agree_under_bf16():
    """bf16 (Paddle AMP O1): the ring's products take half operands as the captured matmuls do."""
    ring = _train(px.Strategy(sequence=4, precision="bf16", loss_reduction="mean"))[0]
    gather = _train(px.Strategy(sequence=4, sequence_attention="gather", precision="bf16", loss_reduction="mean"))[0]
    np.testing.assert_allclose(ring, gather, rtol=2e-3)


def test_a_sequence_no_input_can_split_is_refused():
    step = _step(px.Strategy(sequence=3, loss_reduction="mean"))
    ids = np.zeros((2, SEQ), "int64")
    with pytest.raises(StrategyError, match=r"sequence=3.*dimension 1.*multiple of 3"):
        step(ids, ids)


def test_sequence_with_pipeline_stages_is_refused():
    with pytest.raises(StrategyError, match="sequence=2 with pipeline stages"):
        px.Strategy(sequence=2, stages=2, micro_batches=2)


def _train_flattening(strategy):
    """paddle_xla.models.llama's tiny Llama, whose loss flattens [batch, sequence, vocab] logits to rows."""
    from paddle_xla.models.llama import LlamaConfig, LlamaForCausalLM

    with paddle.utils.unique_name.guard():
        paddle.seed(0)
        net = LlamaForCausalLM(LlamaConfig.named("tiny"))
        opt = paddle.optimizer.SGD(0.5, parameters=net.parameters())
        step = px.train_step(net, None, opt, LlamaForCausalLM.input_spec(SEQ), [], strategy=strategy)
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(STEPS):
        ids = rng.integers(0, 256, (BATCH, SEQ)).astype("int64")
        losses.append(step(ids, np.roll(ids, -1, 1)))
    keys = step.captured.state_keys
    return losses, {keys[k]: v for k, v in step.weights().items() if k in keys}, step


@pytest.fixture(scope="module")
def flattening_one_device():
    return _train_flattening(None)[:2]


def _largest_all_gather(step) -> int:
    """Elements of the largest all-gather result in the compiled step (per device)."""
    ids = np.zeros((1, BATCH, SEQ), "int64")
    s = step.state
    text = compiled_step(
        step._step.engine, s.params, s.buffers, s.opt_state, {"input_ids": ids, "labels": ids}
    ).as_text()
    shapes = re.findall(r"= \w+\[([\d,]*)\]\S* all-gather\(", text)
    return max((int(np.prod([int(d) for d in dims.split(",") if d])) for dims in shapes), default=0)


@pytest.mark.parametrize(
    "layout",
    [
        dict(sequence=4),
        dict(sequence=2, tensor=2, tensor_plan="auto"),
        dict(replicas=2, sequence=2, tensor=2, tensor_plan="auto"),
    ],
)
def test_a_loss_that_flattens_batch_and_sequence_matches_one_device(layout, flattening_one_device):
    """The flattened rows stay split over the sequence devices (sequence_interpreter.py moves them there
    rather than gathering them), beside a vocabulary split over tensor devices too: no device gathers a
    replica's whole logits ([batch x sequence, vocab], as GSPMD did at the loss's reshape). And the numbers
    are one device's."""
    strategy = px.Strategy(**layout)
    losses, weights, step = _train_flattening(strategy)
    want_losses, want_weights = flattening_one_device
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    for k, w in want_weights.items():
        np.testing.assert_allclose(weights[k], w, rtol=1e-5, atol=1e-6, err_msg=k)
    logits = BATCH // strategy.replicas * SEQ * 256
    gathered = _largest_all_gather(step)
    assert gathered < logits, (gathered, logits)
