"""Strategy validation, and the three ways to place ops on pipeline stages."""

import numpy as np
import paddle
import pytest
from paddle.static import InputSpec

import paddle_xla as px
from parallel.helpers import LABEL, assert_weights_close, batches, by_key, loss_fn, setup, train
from parallel.models import BackwardsMLP, StagedMLP


# ---- invalid strategies fail on construction, naming the fix --------------------------------------
@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(replicas=32), "xla_force_host_platform_device_count=32"),
        (dict(stages=4, micro_batches=2), "micro_batches must be at least 4"),
        (dict(replicas=0), "positive int"),
        (dict(precision="fp8"), "precision must be one of"),
        (dict(precision="fp16", loss_scale=None), "needs loss scaling"),
        (dict(precision="bf16", loss_scale=px.LossScale()), "'fp16' only"),
        (dict(shard_optimizer_state=True), "set replicas > 1"),
        (dict(placement={"encoder": 0}), "stages > 1"),
        (dict(stages=2, micro_batches=2, placement={"encoder": 2}), "stage numbers 0 to 1"),
        (dict(stages=2, micro_batches=2, placement={"layers.3-1": 1}), "N <= M"),
        (dict(recompute="some"), "recompute must be one of"),
    ],
)
def test_invalid_strategy(kwargs, match):
    with pytest.raises(px.StrategyError, match=match):
        px.Strategy(**kwargs)


def _step(kind_or_net, strategy, specs=None):
    if isinstance(kind_or_net, str):
        net, opt, specs = setup(kind_or_net)
    else:
        net = kind_or_net
        opt = paddle.optimizer.SGD(0.1, parameters=net.parameters())
    return px.train_step(net, loss_fn(), opt, specs, LABEL, strategy=strategy)


def test_rule_matching_nothing_fails_before_compiling():
    with pytest.raises(px.StrategyError, match=r"\['decoder'\] match no weight.*l1\.bias"):
        _step("mlp", px.Strategy(stages=2, micro_batches=2, placement={"l1": 0, "decoder": 1}))


def test_stage_without_ops_fails_before_compiling():
    with pytest.raises(px.StrategyError, match=r"stage\(s\) \[1, 2\] have no ops"):
        _step("mlp", px.Strategy(stages=4, micro_batches=4, placement={"l1": 0, "l3": 3}))


def test_batch_that_does_not_split():
    step = _step("mlp", px.Strategy(replicas=4, micro_batches=2))
    (x,), (y,) = batches("mlp", 1, batch=12)[0]
    with pytest.raises(px.StrategyError, match="divisible by 8"):
        step(x, y)


def test_steps_per_call_needs_stacked_inputs():
    step = _step("mlp", px.Strategy(steps_per_call=2))
    (x,), (y,) = batches("mlp", 1)[0]
    with pytest.raises(px.FeedError, match=r"stack them as \[2, batch"):
        step(x, y)


# ---- placement: px.stage in model code, rules on layer paths, auto -------------------------------------
def _owned(step):
    """stage -> state_dict keys of the weights it keeps."""
    keys = step.captured.state_keys
    return [sorted(keys[n].removeprefix("net.") for n in names) for names in step._step.engine.own.trainable]


def test_px_stage_in_model_code():
    specs = [InputSpec([None, 16], "float32", "x")]
    paddle.seed(7)
    staged = _step(StagedMLP(), px.Strategy(stages=3, micro_batches=4), specs)
    assert _owned(staged) == [["l1.bias", "l1.weight"], ["l2.bias", "l2.weight"], ["l3.bias", "l3.weight"]]
    paddle.seed(7)
    plain = _step(StagedMLP(), None, specs)  # px.stage does nothing without stages
    for (x,), (y,) in batches("mlp", 3):
        np.testing.assert_allclose(staged(x, y), plain(x, y), rtol=1e-5)
    assert_weights_close(by_key(staged), by_key(plain))


def test_px_stage_out_of_order_is_an_error():
    with pytest.raises(px.StrategyError, match="on stage 0 and reads a value from stage 1"):
        _step(BackwardsMLP(), px.Strategy(stages=2, micro_batches=2), [InputSpec([None, 16], "float32", "x")])


def test_px_stage_beyond_stages():
    with pytest.raises(px.StrategyError, match=r"px.stage\(2\), but Strategy.stages=2"):
        _step(StagedMLP(), px.Strategy(stages=2, micro_batches=2), [InputSpec([None, 16], "float32", "x")])


def test_rules_on_layer_paths():
    rules = {
        "word": 0,
        "pos": 0,
        "token_type": 0,
        "bert.norm": 0,
        "encoder.layers.0": 1,
        "encoder.layers.1-*": 2,
        "pool": 3,
        "head": 3,
    }
    losses, weights, step = train("bert", px.Strategy(stages=4, micro_batches=4, placement=rules))
    owned = _owned(step)
    assert all(k.startswith("bert.encoder.layers.0.") for k in owned[1])
    assert all(k.startswith("bert.encoder.layers.1.") for k in owned[2])
    assert owned[3] == ["bert.pool.bias", "bert.pool.weight", "head.bias", "head.weight"]
    ref_losses, ref_weights, _ = train("bert")
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    assert_weights_close(weights, ref_weights)


def test_auto_placement_prints_a_balanced_plan(capsys):
    _, _, step = train("bert", px.Strategy(stages=2, micro_batches=2, placement="auto"), steps=1)
    plan = capsys.readouterr().out
    assert "pipeline plan (auto, 2 stages" in plan and "stage 1:" in plan
    owned = _owned(step)
    assert "bert.word.weight" in owned[0] and "head.weight" in owned[1]
    assert step._step.engine.bubble_fraction() == pytest.approx(1 / 3)
    per_device = step._step.engine.param_bytes_per_device()["params"]
    total = sum(v.nbytes for v in step.weights().values())
    assert per_device < 0.8 * total


# ---- the auto cut, at its exact place ----------------------------------------------------------------
def _brute_force_best(costs, stages):
    """The smallest possible largest-stage cost over every way to cut `costs` into `stages` runs."""
    import itertools

    n, best = len(costs), float("inf")
    for cuts in itertools.combinations(range(1, n), stages - 1):
        bounds = [0, *cuts, n]
        best = min(best, max(sum(costs[a:b]) for a, b in zip(bounds, bounds[1:])))
    return best


def test_auto_cuts_where_the_largest_stage_is_smallest():
    from paddle_xla.parallel.placement import _balanced_cuts

    assert _balanced_cuts(np.array([1.0, 1, 1, 1, 4]), 2) == [4]
    assert _balanced_cuts(np.array([2.0] * 6), 3) == [2, 4]
    assert _balanced_cuts(np.array([5.0, 1, 1, 1, 1, 1, 5]), 3) == [1, 6]
    rng = np.random.default_rng(3)
    for _ in range(40):
        costs, stages = rng.integers(1, 20, int(rng.integers(3, 9))).astype(float), int(rng.integers(2, 4))
        cuts = _balanced_cuts(costs, stages)
        bounds = [0, *cuts, len(costs)]
        got = max(costs[a:b].sum() for a, b in zip(bounds, bounds[1:]))
        assert got == _brute_force_best(list(costs), stages), (costs, stages, cuts)


def test_auto_cut_moves_to_the_cheapest_send_within_ten_percent():
    from paddle_xla.parallel.placement import _cheaper_cuts

    costs, send = np.ones(20), np.full(20, 100.0)
    send[10] = 1.0  # NOTE: sending after op 10 (a cut at 11) is cheapest
    assert _cheaper_cuts(costs, [10], send) == [11]
    send[10], send[12] = 100.0, 1.0  # a cut at 13 would make a stage of 13 > 1.1 x 10
    assert _cheaper_cuts(costs, [10], send) == [10]


def test_auto_placement_of_the_test_bert_cuts_at_its_exact_op():
    """End to end: the weighted ops of stage 0 are exactly the first k, k the balanced cut of their
    costs moved to the cheapest send (the two functions above), and the rest are stage 1's."""
    from paddle_xla.parallel import report
    from paddle_xla.parallel.graphs import DataFlow
    from paddle_xla.parallel.placement import _balanced_cuts, _cheaper_cuts

    _, _, step = train("bert", px.Strategy(stages=2, micro_batches=2, placement="auto"), steps=1)
    graph, placement = step.graph, step._step.engine.placement
    cost, cut_bytes = report.costs(graph, report.stand_in_values(graph, "fp32"))
    flow = DataFlow(graph)
    idx = [i for i in range(len(flow.ops)) if flow.weighted[i]]
    c = np.array([max(float(cost[i]), 1e-9) for i in idx])
    (k,) = _cheaper_cuts(c, _balanced_cuts(c, 2), np.array([cut_bytes[i] for i in idx]))
    assert [placement.stage_of[i] for i in idx] == [0] * k + [1] * (len(idx) - k)
    assert 0 < k < len(idx)
