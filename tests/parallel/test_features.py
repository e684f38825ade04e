"""Device loops, ZeRO-1, recomputation, checkpoints of sharded state: each equal to one device."""
import numpy as np
import pytest

import paddle_xla as px
from parallel.helpers import LABEL, assert_weights_close, batches, by_key, loss_fn, setup, train


@pytest.fixture(scope="module")
def mlp_reference():
    return train("mlp", steps=4)[:2]


def _stepper(strategy):
    net, opt, specs = setup("mlp")
    return px.train_step(net, loss_fn(), opt, specs, LABEL, strategy=strategy)


def test_steps_per_call_runs_a_device_loop(mlp_reference):
    """Lamb with global-norm clipping, pipelined and sharded, 2 steps per call: stacked or listed inputs."""
    st = px.Strategy(replicas=2, stages=2, micro_batches=2, steps_per_call=2)
    step = _stepper(st)
    data = batches("mlp", 4)
    first = step(np.stack([data[0][0][0], data[1][0][0]]), np.stack([data[0][1][0], data[1][1][0]]))
    second = step([data[2][0][0], data[3][0][0]], [data[2][1][0], data[3][1][0]])
    np.testing.assert_allclose(first + second, mlp_reference[0], rtol=1e-5)
    assert_weights_close(by_key(step), mlp_reference[1])
    assert step.state.step == 4


@pytest.mark.parametrize("stages", [1, 2])
def test_zero1_shards_optimizer_state(mlp_reference, tmp_path, stages):
    st = px.Strategy(replicas=4, stages=stages, micro_batches=2 * stages, shard_optimizer_state=True)
    step = _stepper(st)
    data = batches("mlp", 4)
    losses = [step(*x, *y) for x, y in data[:2]]
    engine = step._step.engine
    for arr in step.state.opt_state.arrays.values():
        assert arr.sharding.spec[1] == "replica"
        assert {s.data.shape for s in arr.addressable_shards} == {(1, arr.shape[1] // 4)}
    assert engine.param_bytes_per_device()["optimizer"] * 4 <= sum(
        v.nbytes for acc in step.state.opt_state.values() for v in acc.values()) + 64
    # NOTE: a checkpoint gathers the shards; loading scatters them again and the curve goes on.
    step.save_checkpoint(str(tmp_path / "ckpt"))
    losses += [step(*x, *y) for x, y in data[2:]]
    np.testing.assert_allclose(losses, mlp_reference[0], rtol=1e-5)
    assert_weights_close(by_key(step), mlp_reference[1])
    again = _stepper(st)
    again.load_checkpoint(str(tmp_path / "ckpt"))
    np.testing.assert_allclose([again(*x, *y) for x, y in data[2:]], losses[2:], rtol=1e-6)


def test_stage_weights_live_on_their_devices():
    step = _stepper(px.Strategy(replicas=2, stages=2, micro_batches=2))
    (x,), (y,) = batches("mlp", 1)[0]
    step(x, y)
    for arr in step.state.params.arrays.values():
        assert arr.sharding.spec[0] == "stage"
        # NOTE: each device holds one stage's row: its own weights, not the other stage's.
        assert {s.data.shape for s in arr.addressable_shards} == {(1, arr.shape[1])}


@pytest.mark.parametrize("kind,recompute,stages", [("mlp", "full", 1), ("mlp", "stage", 2), ("bert", "layer", 1),
                                                    ("bert", "layer", 2)])
def test_recompute_changes_no_number(kind, recompute, stages):
    st = px.Strategy(stages=stages, micro_batches=2, recompute=recompute)
    losses, weights, _ = train(kind, st, steps=2)
    ref_losses, ref_weights, _ = train(kind, steps=2)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    assert_weights_close(weights, ref_weights)
