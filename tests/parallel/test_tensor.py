"""Model parallelism inside a layer: every layout of replicas x tensor, with and without sharding,
reproduces one device (16 virtual CPU devices, conftest), and splits memory as measured by XLA.

References: one device with as many micro-batches as the layout has groups (replicas x
micro_batches), since each group normalises and averages as one replica does."""

import numpy as np
import paddle
import paddle.distributed as dist
import pytest

import paddle_xla as px
from paddle_xla.errors import StrategyError
from paddle_xla.parallel.engine import memory_analysis
from parallel.helpers import assert_weights_close, tensor_batches, train_tensor

KINDS = ["encoder", "decoder"]


@pytest.fixture(scope="module")
def references():
    """(kind, groups) -> (losses, weights) on one device."""
    cache = {}

    def get(kind, groups, precision="fp32"):
        key = (kind, groups, precision)
        if key not in cache:
            st = None if (groups, precision) == (1, "fp32") else px.Strategy(micro_batches=groups, precision=precision)
            cache[key] = train_tensor(kind, st)[:2]
        return cache[key]

    return get


def _check(kind, strategy, references, precision="fp32", rtol=1e-5, wrtol=1e-4):
    losses, weights, step = train_tensor(kind, strategy)
    want_losses, want_weights = references(kind, strategy.groups, precision)
    np.testing.assert_allclose(losses, want_losses, rtol=rtol)
    assert_weights_close(weights, want_weights, rtol=wrtol, atol=1e-6 if precision == "fp32" else 1e-4)
    return step


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("replicas,tensor,sharding", [(1, 4, 0), (4, 4, 0), (16, 1, 3), (4, 4, 3)])
def test_layout_matches_one_device(kind, replicas, tensor, sharding, references):
    step = _check(kind, px.Strategy(replicas=replicas, tensor=tensor, sharding=sharding), references)
    params = step._step.engine.shard_P
    if tensor > 1:
        assert any("tensor" in sh.spec for sh in params.values())
        # NOTE: a colwise layer's bias left whole computes the same numbers under GSPMD (the models'
        # biases are large, so a wrongly sliced one would not): what shows it is what a device holds.
        dims, keys = step._step.engine.tdim, step.captured.state_keys
        colwise = {keys[n].removesuffix("weight") for n, d in dims.items() if keys[n].endswith(".weight") and d == 1}
        biases = [n for n in params if keys[n].endswith(".bias") and keys[n].removesuffix("bias") in colwise]
        assert biases and all("tensor" in params[n].spec for n in biases), {keys[n]: params[n].spec for n in biases}
    if sharding == 3:
        assert any("replica" in sh.spec for sh in params.values())


@pytest.mark.parametrize("kind", KINDS)
def test_pipeline_of_split_layers_matches_one_device(kind, references):
    # NOTE: (1, 4, 4): four stages, each layer split over four devices; the decoder's tied embedding is
    # shared by the first and last stage, split over its vocab on both.
    step = _check(kind, px.Strategy(stages=4, tensor=4, micro_batches=4), references)
    engine = step._step.engine
    split = [
        k
        for k, x in engine.place(step.state.params, step.state.buffers, step.state.opt_state)[0].items()
        if k.endswith("|tensor")
    ]
    assert split, "no weight was packed as tensor slices"


@pytest.mark.parametrize("kind", KINDS)
def test_pipeline_1f1b_bf16_of_split_layers_matches_one_device_bf16(kind, references):
    _check(
        kind,
        px.Strategy(replicas=2, stages=2, tensor=4, micro_batches=2, schedule="1f1b", precision="bf16"),
        references,
        precision="bf16",
        rtol=2e-3,
        wrtol=2e-2,
    )


def test_a_pipeline_of_split_layers_holds_a_quarter_of_the_weights():
    whole = train_tensor("decoder", px.Strategy(stages=2, micro_batches=2), steps=1)[2]._step.engine
    split = train_tensor("decoder", px.Strategy(stages=2, tensor=4, micro_batches=2), steps=1)[2]._step.engine
    got, want = split.param_bytes_per_device(), whole.param_bytes_per_device()
    assert got["params"] <= 0.35 * want["params"], (got, want)
    assert got["optimizer"] <= 0.35 * want["optimizer"], (got, want)


@pytest.mark.parametrize("sharding", [1, 2])
def test_sharding_stages_1_and_2_match_one_device(sharding, references):
    step = _check("encoder", px.Strategy(replicas=4, tensor=2, sharding=sharding, micro_batches=2), references)
    engine = step._step.engine
    assert all("replica" not in sh.spec for sh in engine.shard_P.values())  # weights stay whole
    assert any("replica" in sh.spec for accs in engine.shard_O.values() for sh in accs.values())


def test_tensor_parallel_bf16_matches_one_device_bf16(references):
    _check(
        "decoder",
        px.Strategy(replicas=4, tensor=4, precision="bf16"),
        references,
        precision="bf16",
        rtol=2e-3,
        wrtol=2e-2,
    )


def _memory(step, kind):
    feeds = {f.name: np.stack([x]) for f, x in zip(step.graph.feeds, tensor_batches(kind, 1)[0])}
    s = step.state
    return memory_analysis(step._step.engine, s.params, s.buffers, s.opt_state, feeds)


def test_memory_splits_as_measured_by_xla():
    # NOTE: argument bytes are what a device holds between steps: its weights, optimizer state and batch. No
    # step runs: memory_analysis compiles the step itself.
    whole = _memory(train_tensor("decoder", px.Strategy(replicas=4), steps=0)[2], "decoder")
    tensor = _memory(train_tensor("decoder", px.Strategy(tensor=4), steps=0)[2], "decoder")
    assert tensor["argument_bytes"] <= 0.3 * whole["argument_bytes"], (tensor, whole)
    sixteen = train_tensor("decoder", px.Strategy(replicas=16), steps=0)[2]
    sharded = train_tensor("decoder", px.Strategy(replicas=16, sharding=3), steps=0)[2]
    plain, fsdp = _memory(sixteen, "decoder"), _memory(sharded, "decoder")
    assert fsdp["argument_bytes"] <= 0.1 * plain["argument_bytes"], (fsdp, plain)
    # NOTE: the peak too: the gathered weights and full gradients are transient, not held.
    peak = lambda m: m["argument_bytes"] + m["temp_bytes"]  # noqa: E731
    assert peak(fsdp) <= 0.5 * peak(plain), (fsdp, plain)


def test_paddle_plan_objects_split_as_their_names(references):
    plan = {
        "*.linear1": dist.ColWiseParallel(),
        "*.linear2": dist.RowWiseParallel(),
        "bert.word": dist.RowWiseParallel(),
    }
    st = px.Strategy(tensor=4, tensor_plan=plan)
    assert st.tensor_plan == {"*.linear1": "colwise", "*.linear2": "rowwise", "bert.word": "rowwise"}
    step = _check("encoder", st, references)
    dims = step._step.engine.tdim
    keys = step.captured.state_keys
    split = {keys[n].removeprefix("net."): d for n, d in dims.items() if d is not None}
    assert split["bert.encoder.layers.0.linear1.weight"] == 1 and split["bert.encoder.layers.0.linear1.bias"] == 0
    assert split["bert.encoder.layers.1.linear2.weight"] == 0 and "bert.encoder.layers.1.linear2.bias" not in split
    assert split["bert.word.weight"] == 0 and len(split) == 7


# ---- bad input ---------------------------------------------------------------------------------
def _step(kind, strategy):
    from parallel.tensor_models import setup

    net, opt, specs, labels, loss = setup(kind)
    return px.train_step(net, loss, opt, specs, labels, strategy=strategy)


def test_a_degree_that_does_not_split_the_heads_names_the_layer():
    with pytest.raises(StrategyError, match=r"self_attn.q_proj.*4 attention heads.*tensor=8.*\[2, 4\]"):
        _step("encoder", px.Strategy(tensor=8, tensor_plan={"*.q_proj": "colwise"}))


def test_a_degree_that_does_not_divide_a_split_dimension_lists_those_that_do():
    with pytest.raises(
        StrategyError,
        match=r"tensor=3 does not divide dimension 1 \(128\) of 'net.bert.encoder"
        r".layers.0.linear1.weight'.*\[2, 4, 8, 16, 32, 64\]",
    ):
        _step("encoder", px.Strategy(tensor=3, tensor_plan={"*.linear1": "colwise"}))


def test_a_rule_that_matches_no_layer_is_named():
    with pytest.raises(StrategyError, match=r"rule\(s\) \['\*.up_proj'\] match no layer"):
        _step("encoder", px.Strategy(tensor=2, tensor_plan={"*.linear1": "colwise", "*.up_proj": "colwise"}))


@pytest.mark.parametrize(
    "fields,match",
    [
        (dict(sharding=2), r"sharding=2 splits state across replicas, but replicas=1"),
        (dict(replicas=2, sharding=4), r"sharding must be one of \(0, 1, 2, 3\)"),
        (dict(tensor_plan={"*.linear1": "colwise"}), r"tensor_plan splits layers over the tensor axis, but tensor=1"),
        (dict(tensor=2, tensor_plan={"*.linear1": "diagonal"}), r"asks for 'diagonal'; use one of"),
        (dict(replicas=2, tensor=2, stages=2, micro_batches=2, sharding=2), r"sharding=2 with pipeline stages"),
        (dict(tensor=32), r"replicas x stages x sequence x tensor = 1 x 1 x 1 x 32 = 32 devices, but only 16"),
    ],
)
def test_an_invalid_strategy_says_what_to_change(fields, match):
    with pytest.raises(StrategyError, match=match):
        px.Strategy(**fields)


def test_shard_optimizer_state_is_sharding_1():
    st = px.Strategy(replicas=2, shard_optimizer_state=True)
    assert st.sharding == 1 and px.Strategy.from_dict(st.to_dict()) == st
    assert px.Strategy(replicas=2, sharding=3).shard_optimizer_state


# ---- Paddle's own annotations --------------------------------------------------------------------
def _annotated_encoder(mesh):
    from parallel.tensor_models import setup

    net, _, specs, labels, loss = setup("encoder")
    for layer in net.bert.encoder.layers:
        layer.linear1.weight = dist.shard_tensor(layer.linear1.weight, mesh, [dist.Shard(1)])
        layer.linear1.bias = dist.shard_tensor(layer.linear1.bias, mesh, [dist.Shard(0)])
        layer.linear2.weight = dist.shard_tensor(layer.linear2.weight, mesh, [dist.Shard(0)])
    opt = paddle.optimizer.Momentum(
        0.05,
        momentum=0.9,
        parameters=net.parameters(),
        weight_decay=paddle.regularizer.L2Decay(1e-4),
        grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0),
    )
    return net, opt, specs, labels, loss


def test_dist_shard_tensor_annotations_set_the_tensor_plan(references):
    net, opt, specs, labels, loss = _annotated_encoder(dist.ProcessMesh([0], dim_names=["mp"]))
    step = px.train_step(net, loss, opt, specs, labels, strategy=px.Strategy(replicas=2, tensor=4))
    engine = step._step.engine
    assert engine.tensor_plan.how == "annotations"
    split = {step.captured.state_keys[n].removeprefix("net."): d for n, d in engine.tdim.items() if d is not None}
    assert split == {
        f"bert.encoder.layers.{i}.{k}": d
        for i in (0, 1)
        for k, d in (("linear1.weight", 1), ("linear1.bias", 0), ("linear2.weight", 0))
    }
    losses = [step(*b) for b in tensor_batches("encoder", 3)]
    want_losses, want = references("encoder", 2)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    got = {step.captured.state_keys[k].removeprefix("net."): np.asarray(v) for k, v in step.weights().items()}
    assert_weights_close(got, want)


def test_an_annotation_over_other_processes_ranks_says_what_to_do():
    net, opt, specs, labels, loss = _annotated_encoder(dist.ProcessMesh([0, 1, 2, 3], dim_names=["mp"]))
    with pytest.raises(
        px.CaptureError,
        match=r"split by paddle.distributed.shard_tensor over a process mesh of "
        r"\[4\].*holds only its own slice \(\[32\] of \[128\].*"
        r"paddle-xla launch --nproc 4.*dist.ColWiseParallel",
    ):
        px.train_step(net, loss, opt, specs, labels, strategy=px.Strategy(tensor=4))
