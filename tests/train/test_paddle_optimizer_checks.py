"""What interop.paddle_optimizer accepts from Paddle, and what it refuses: optimizer classes (a subclass with an
update of its own must not train as its Paddle base) and optimizer state files (.pdopt) that hold state for other
parameters, frozen ones, or a multi_precision optimizer's master-weight accumulators. Numbers against native Paddle.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import paddle
import paddle.nn as nn
import pytest
from paddle.static import InputSpec

import paddle_xla as px
from paddle_xla.errors import CheckpointError, TrainingError
from paddle_xla.interop.paddle_optimizer import from_paddle_state_dict, optimizer_config
from paddle_xla.train import lr as lr_lib
from paddle_xla.train import optim

paddle.set_device("cpu")
P = paddle.optimizer
RTOL, ATOL = 1e-6, 1e-6  # NOTE: as tests/train/test_optim.py: Paddle's CPU kernels fuse FMAs otherwise


def _params(names_shapes, seed=0, dtype="float32"):
    rng = np.random.default_rng(seed)
    out = []
    for name, shape in names_shapes:
        init = paddle.nn.initializer.Assign(rng.standard_normal(shape).astype("float32"))
        out.append(
            paddle.create_parameter(list(shape), dtype, attr=paddle.ParamAttr(name=name), default_initializer=init)
        )
    return out


def _native_steps(opt, params, grads_seq):
    for grads in grads_seq:
        loss = sum((p * paddle.to_tensor(grads[p.name])).sum() for p in params if p.name in grads)
        loss.backward()
        opt.step()
        opt.clear_grad()


def _our_steps(config, params, state, grads_seq):
    step = jax.jit(functools.partial(optim.apply, config))
    lr = np.float32(lr_lib.as_schedule(config.learning_rate).lr_at(0))
    for grads in grads_seq:
        params, state = step(params, {n: jnp.asarray(g) for n, g in grads.items()}, state, lr)
    return params, state


def _grads(shapes, steps, seed=1):
    rng = np.random.default_rng(seed)
    return [{n: rng.standard_normal(s).astype("float32") for n, s in shapes} for _ in range(steps)]


def _close(ours, theirs, what):
    assert set(ours) == set(theirs), what
    for k in ours:
        if isinstance(ours[k], dict):
            _close(ours[k], theirs[k], f"{what}[{k}]")
        else:
            np.testing.assert_allclose(
                np.asarray(ours[k]), np.asarray(theirs[k]), rtol=RTOL, atol=ATOL, err_msg=f"{what}[{k}]"
            )


def _pf_optimizers():
    from generation.paddleformers import module

    return module("utils.optimizer")


# -- which optimizers train -------------------------------------------------------------------------------

SHAPES = [("w", (4, 3)), ("b", (3,))]


def test_paddleformers_adamw_mini_is_refused_its_numbers_are_not_adamws():
    """PaddleFormers' optim='adamw_mini' is an AdamW subclass with one moment2 per tensor: read as AdamW it would
    train with other numbers, silently."""
    pf = _pf_optimizers()
    grads = _grads(SHAPES, 3)
    finals = {}
    for cls in (P.AdamW, pf.AdamWMini):
        with paddle.utils.unique_name.guard():
            params = _params(SHAPES)
            opt = cls(0.01, parameters=params, weight_decay=0.01)
            _native_steps(opt, params, grads)
            finals[cls.__name__] = params[0].numpy()
    assert np.abs(finals["AdamW"] - finals["AdamWMini"]).max() > 1e-4
    with paddle.utils.unique_name.guard():
        opt = pf.AdamWMini(0.01, parameters=_params(SHAPES))
    with pytest.raises(TrainingError) as e:
        optimizer_config(opt)
    message = str(e.value)
    for words in (
        "paddleformers.utils.optimizer.AdamWMini",
        "paddleformers/utils/optimizer.py",
        "_append_optimize_op",
        "subclasses paddle.optimizer.AdamW",
        "use one of paddle.optimizer.AdamW",
        "optim='adamw'",
    ):
        assert words.lower() in message.lower(), (words, message)


def test_paddleformers_adamw_custom_is_refused():
    pf = _pf_optimizers()
    with paddle.utils.unique_name.guard():
        opt = pf.AdamWCustom(None, False, 0.01, parameters=_params(SHAPES))
    with pytest.raises(TrainingError, match="AdamWCustom .*overrides .*_append_optimize_op"):
        optimizer_config(opt)


class _OwnKernel(P.Adam):
    def _append_optimize_op(self, block, param_and_grad):  # e.g. a clipped Adam
        return super()._append_optimize_op(block, param_and_grad)


class _OwnStep(P.Momentum):
    def step(self):
        super().step()


class _OwnMoments(P.AdamW):
    def _add_moments_pows(self, p):
        super()._add_moments_pows(p)


@pytest.mark.parametrize(
    "make,overridden",
    [
        (lambda ps: _OwnKernel(0.1, parameters=ps), "_append_optimize_op"),
        (lambda ps: _OwnStep(0.1, parameters=ps), "step"),
        (lambda ps: _OwnMoments(0.1, parameters=ps), "_add_moments_pows"),
    ],
)
def test_a_subclass_with_its_own_update_is_refused(make, overridden):
    with paddle.utils.unique_name.guard():
        opt = make(_params(SHAPES))
    with pytest.raises(TrainingError) as e:
        optimizer_config(opt)
    message = str(e.value)
    assert type(opt).__qualname__ in message and __file__ in message and overridden in message
    assert "use one of paddle.optimizer.adamw" in message.lower()


def test_an_update_method_patched_on_the_instance_is_refused():
    with paddle.utils.unique_name.guard():
        opt = P.Adam(0.1, parameters=_params(SHAPES))
    opt._append_optimize_op = lambda block, param_and_grad: None
    with pytest.raises(TrainingError, match="_append_optimize_op"):
        optimizer_config(opt)


def test_train_step_refuses_a_subclass_with_its_own_update():
    pf = _pf_optimizers()
    with paddle.utils.unique_name.guard():
        net = nn.Linear(4, 2)
        opt = pf.AdamWMini(0.01, parameters=net.parameters())
    with pytest.raises(TrainingError, match="AdamWMini"):
        px.train_step(
            net, nn.MSELoss(), opt, [InputSpec([None, 4], "float32", "x")], [InputSpec([None, 2], "float32", "y")]
        )


class _Configured(P.AdamW):
    """A subclass that only sets its own defaults and adds a method: its update is AdamW's."""

    def __init__(self, learning_rate, parameters):
        super().__init__(learning_rate, parameters=parameters, beta1=0.8, weight_decay=0.05, amsgrad=True)

    def describe(self):
        return f"{type(self).__name__}(beta1={self._beta1})"


def test_a_subclass_that_leaves_the_update_alone_trains_as_its_base():
    grads = _grads(SHAPES, 8)
    with paddle.utils.unique_name.guard():
        params = _params(SHAPES)
        opt = _Configured(0.01, params)
        config = optimizer_config(opt)
        start = {p.name: jnp.asarray(p.numpy()) for p in params}
        ours, state = _our_steps(config, start, optim.init_state(config, start), grads)
        _native_steps(opt, params, grads)
    assert config.rule == optim.AdamW(beta1=0.8, weight_decay=0.05, amsgrad=True)
    _close(ours, {p.name: p.numpy() for p in params}, "params")
    _close(state, from_paddle_state_dict(config, opt.state_dict())[0], "state")


# -- which optimizer states load ------------------------------------------------------------------------

BODY_HEAD = [("body.w", (4, 3)), ("body.b", (3,)), ("head.w", (3, 2))]


def _saved_state(tmp_path, make_opt, names_shapes=BODY_HEAD, steps=4):
    """Train all of names_shapes natively for a few steps; the .pdopt (as paddle.load reads it) and the weights."""
    with paddle.utils.unique_name.guard():
        params = _params(names_shapes)
        opt = make_opt(params)
        _native_steps(opt, params, _grads(names_shapes, steps, seed=5))
        paddle.save(opt.state_dict(), str(tmp_path / "opt.pdopt"))
        weights = {p.name: p.numpy() for p in params}
    return paddle.load(str(tmp_path / "opt.pdopt")), weights


@pytest.mark.parametrize("given", ["frozen, given to the optimizer", "not given to the optimizer"])
def test_extra_state_for_a_frozen_parameter_loads_and_continues_as_paddle(tmp_path, given):
    """Fine-tuning the body alone from a .pdopt of the whole model: the head's moments are extra, nothing is lost."""
    saved, weights = _saved_state(tmp_path, lambda ps: P.AdamW(0.01, parameters=ps, weight_decay=0.1))
    grads = _grads(BODY_HEAD[:2], 6)
    with paddle.utils.unique_name.guard():
        params = _params(BODY_HEAD)
        for p in params:
            p.set_value(weights[p.name])
        params[2].stop_gradient = True
        opt = P.AdamW(0.01, parameters=params if given.startswith("frozen") else params[:2], weight_decay=0.1)
        config = optimizer_config(opt)
        start = {p.name: jnp.asarray(p.numpy()) for p in params}
        state, _ = from_paddle_state_dict(config, saved, start)
        assert set(state) == {"body.w", "body.b"}
        _close(state["body.w"], {acc: saved[f"body.w_{acc}_0"].numpy() for acc in state["body.w"]}, "loaded")
        ours, our_state = _our_steps(config, start, state, grads)
        opt.set_state_dict(saved)
        _native_steps(opt, params, grads)
    _close(ours, {p.name: p.numpy() for p in params}, "params")
    assert np.array_equal(ours["head.w"], weights["head.w"])
    theirs, _ = from_paddle_state_dict(config, opt.state_dict())
    _close(our_state, theirs, "state")


def test_train_step_takes_a_pdopt_with_state_for_a_frozen_layer(tmp_path):
    """The same through px.train_step: a Paddle optimizer over the trainable layer, set_state_dict from a .pdopt of
    a run that trained both layers, then ours and native Paddle continue alike."""
    rng = np.random.default_rng(0)
    batches = [
        (rng.standard_normal((8, 4)).astype("float32"), rng.standard_normal((8, 2)).astype("float32")) for _ in range(8)
    ]

    def build():
        paddle.seed(3)
        net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        return net

    def native_step(net, opt, x, y):
        loss = nn.functional.mse_loss(net(paddle.to_tensor(x)), paddle.to_tensor(y))
        loss.backward()
        opt.step()
        opt.clear_grad()
        return float(loss)

    with paddle.utils.unique_name.guard():
        net = build()
        opt = P.Adam(0.01, parameters=net.parameters())
        for x, y in batches[:3]:
            native_step(net, opt, x, y)
        paddle.save(opt.state_dict(), str(tmp_path / "all.pdopt"))
        paddle.save(net.state_dict(), str(tmp_path / "all.pdparams"))

    def resumed():
        with paddle.utils.unique_name.guard():
            net = build()
            net.set_state_dict(paddle.load(str(tmp_path / "all.pdparams")))
            for p in net[2].parameters():
                p.stop_gradient = True
            opt = P.Adam(0.01, parameters=net[0].parameters())
            opt.set_state_dict(paddle.load(str(tmp_path / "all.pdopt")))
        return net, opt

    net, opt = resumed()
    step = px.train_step(
        net, nn.MSELoss(), opt, [InputSpec([None, 4], "float32", "x")], [InputSpec([None, 2], "float32", "y")]
    )
    saved = paddle.load(str(tmp_path / "all.pdopt"))
    w = net[0].weight.name
    np.testing.assert_array_equal(np.asarray(step.state.opt_state[w]["moment1"]), saved[f"{w}_moment1_0"].numpy())
    native_net, native_opt = resumed()
    ours = [step(x, y) for x, y in batches[3:]]
    # NOTE: Paddle names the accumulators its first step() creates by the process's name counters: in a fresh
    # guard they are the _0 names the loaded state holds (another test's Adam in this process made _1 of them)
    with paddle.utils.unique_name.guard():
        theirs = [native_step(native_net, native_opt, x, y) for x, y in batches[3:]]
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    trained = step.weights()
    for t in native_net.state_dict().values():
        np.testing.assert_allclose(trained[t.name], t.numpy(), rtol=1e-5, atol=1e-6, err_msg=t.name)


def _multi_precision_state(names_shapes, seed=7, name=None):
    """A multi_precision AdamW's state_dict for bfloat16 parameters, as Paddle lays it out: accumulators named
    after the float32 master weights (<param>_fp32_master_0_moment1_0) and the masters under "master_weights".
    NOTE: Paddle's CPU build has no bfloat16 AdamW kernel, so the accumulators are created as step() creates
    them, and given values."""
    rng = np.random.default_rng(seed)
    with paddle.utils.unique_name.guard():
        params = _params(names_shapes, dtype="bfloat16")
        opt = P.AdamW(0.01, parameters=params, multi_precision=True, name=name)
        opt._create_accumulators(paddle.static.default_main_program().global_block(), params)
        state = opt.state_dict()
        for key, value in state.items():
            if key != "master_weights":
                value.set_value(rng.uniform(0.1, 1.0, value.shape).astype("float32"))
    assert any("_fp32_master_0_moment1_0" in k for k in state) and set(state["master_weights"]) == {
        n for n, _ in names_shapes
    }
    return state


def test_multi_precision_state_of_this_model_loads():
    """Its moments are the float32 masters' moments, which is what paddle_xla's float32 parameters train with."""
    saved = _multi_precision_state(BODY_HEAD)
    with paddle.utils.unique_name.guard():
        params = _params(BODY_HEAD)
        config = optimizer_config(P.AdamW(0.01, parameters=params, multi_precision=True))
    state, _ = from_paddle_state_dict(config, saved, {p.name: p.numpy() for p in params})
    for name, _ in BODY_HEAD:
        for acc in ("moment1", "moment2", "beta1_pow_acc", "beta2_pow_acc"):
            np.testing.assert_array_equal(
                np.asarray(state[name][acc]), saved[f"{name}_fp32_master_0_{acc}_0"].numpy(), err_msg=f"{name}.{acc}"
            )


def test_multi_precision_state_of_a_differently_named_model_is_refused():
    saved = _multi_precision_state([("enc.w", (4, 3)), ("enc.b", (3,)), ("enc.head", (3, 2))])
    with paddle.utils.unique_name.guard():
        params = _params(BODY_HEAD)
        config = optimizer_config(P.AdamW(0.01, parameters=params))
    with pytest.raises(CheckpointError) as e:
        from_paddle_state_dict(config, saved, {p.name: p.numpy() for p in params})
    message = str(e.value)
    assert "parameters this model does not have" in message
    assert "none for 3 of this model's 3 trainable parameters" in message and "'body.w'" in message
    assert "enc.w_fp32_master_0_" in message or "master_weights['enc" in message
    assert "unique_name.guard()" in message


def test_multi_precision_state_of_another_model_with_these_names_is_refused():
    """Same names, other shapes: taken, the moments would not fit (and before, the master-weight keys were passed
    over, so every parameter started from fresh moments, silently)."""
    saved = _multi_precision_state([("body.w", (5, 3)), ("body.b", (3,)), ("head.w", (3, 2))])
    with paddle.utils.unique_name.guard():
        params = _params(BODY_HEAD)
        config = optimizer_config(P.AdamW(0.01, parameters=params))
    shapes = r"body.w_fp32_master_0_moment1_0 has shape \[5, 3\].*body.w has \[4, 3\]"
    with pytest.raises(CheckpointError, match=shapes):
        from_paddle_state_dict(config, saved, {p.name: p.numpy() for p in params})


def test_state_of_an_optimizer_with_another_name_is_refused(tmp_path):
    """Keys "body.w_enc_moment1_0" are no state for an unnamed optimizer's "body.w_moment1_0" (Paddle's own
    set_state_dict + step stops on them); before, they passed as this model's and every moment started fresh."""
    saved, _ = _saved_state(tmp_path, lambda ps: P.Adam(0.01, parameters=ps, name="enc"))
    with paddle.utils.unique_name.guard():
        params = _params(BODY_HEAD)
        config = optimizer_config(P.Adam(0.01, parameters=params))
    with pytest.raises(CheckpointError, match="optimizer of another name") as e:
        from_paddle_state_dict(config, saved, {p.name: p.numpy() for p in params})
    assert "body.w_enc_" in str(e.value)


def test_fresh_state_for_a_parameter_is_fine_when_nothing_in_the_file_is_foreign(tmp_path):
    """A parameter Paddle never stepped has no accumulators yet; with nothing unplaced in the file it starts fresh
    (as in Paddle, which creates them at its first step)."""
    saved, _ = _saved_state(tmp_path, lambda ps: P.Adam(0.01, parameters=ps), names_shapes=BODY_HEAD[:2])
    with paddle.utils.unique_name.guard():
        params = _params(BODY_HEAD)
        config = optimizer_config(P.Adam(0.01, parameters=params))
    start = {p.name: jnp.asarray(p.numpy()) for p in params}
    state, _ = from_paddle_state_dict(config, saved, start)
    _close(state["head.w"], optim.init_state(config, start)["head.w"], "fresh")
    np.testing.assert_array_equal(np.asarray(state["body.w"]["moment2"]), saved["body.w_moment2_0"].numpy())
