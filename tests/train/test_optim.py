"""train.optim against native Paddle: same parameters, same gradients, 12 steps, same numbers.

Each case builds a few Paddle parameters (different shapes; one with optimize_attr learning_rate
0.5; one frozen; one excluded from decay), runs native Paddle where p.grad = G_t (the backward of
sum(p * G_t)), and runs the same G_t through a jitted `optim.apply` from the config that
`interop.optim.optimizer_config` read off the same optimizer.
"""

import ast
import functools
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import paddle
import pytest

from paddle_xla.interop.paddle_optimizer import (
    from_paddle_state_dict,
    optimizer_config,
    schedule_state,
    to_paddle_state_dict,
)
from paddle_xla.train import clip as clip_lib
from paddle_xla.train import lr as lr_lib
from paddle_xla.train import optim

paddle.set_device("cpu")
STEPS = 12
SHAPES = {"w": (4, 3), "b": (3,), "half": (5,), "frozen": (2, 2), "nodecay": (3, 2)}
# NOTE: Paddle's CPU kernels (Eigen) contract a*b + c into FMAs and XLA fuses differently, so
# values differ by float32 ulps; the atol covers parameters that cross zero (ulps of O(1) values).
RTOL, ATOL = 1e-6, 1e-6


@pytest.fixture(autouse=True)
def fresh_paddle_names():
    # NOTE: dygraph refuses a parameter name used twice in one name scope, and accumulator names
    # get a per-process counter suffix; a fresh scope per test keeps both predictable ("_0").
    with paddle.utils.unique_name.guard():
        yield


def make_params(seed=0, own_reg=None, no_clip=()):
    """Paddle parameters named after SHAPES; 'half' has lr 0.5, 'frozen' is stop_gradient."""
    rng = np.random.default_rng(seed)
    params = []
    for name, shape in SHAPES.items():
        attr = paddle.ParamAttr(
            name=name,
            learning_rate=0.5 if name == "half" else 1.0,
            regularizer=own_reg if name == "b" else None,
            need_clip=name not in no_clip,
        )
        init = paddle.nn.initializer.Assign(rng.standard_normal(shape).astype("float32"))
        p = paddle.create_parameter(list(shape), "float32", attr=attr, default_initializer=init)
        p.stop_gradient = name == "frozen"
        params.append(p)
    return params


def grad_sequence(seed=1, steps=STEPS, scale=1.0):
    rng = np.random.default_rng(seed)
    return [
        {n: (scale * rng.standard_normal(s)).astype("float32") for n, s in SHAPES.items() if n != "frozen"}
        for _ in range(steps)
    ]


def run_native(opt, params, grads_seq, scheduler=None):
    for grads in grads_seq:
        loss = sum((p * paddle.to_tensor(grads[p.name])).sum() for p in params if not p.stop_gradient)
        loss.backward()
        opt.step()
        opt.clear_grad()
        if scheduler is not None:
            scheduler.step()


def run_ours(config, params, state, grads_seq, first_step=0):
    step = jax.jit(functools.partial(optim.apply, config))
    schedule = lr_lib.as_schedule(config.learning_rate)
    for t, grads in enumerate(grads_seq):
        lr = np.float32(schedule.lr_at(first_step + t))
        params, state = step(params, {n: jnp.asarray(g) for n, g in grads.items()}, state, lr)
    return params, state


def snapshot(params):
    return {p.name: jnp.asarray(p.numpy()) for p in params}


def assert_trees_close(ours, theirs, what):
    assert set(ours) == set(theirs), what
    for name in ours:
        a, b = ours[name], theirs[name]
        if isinstance(a, dict):
            assert_trees_close(a, b, f"{what}[{name}]")
        else:
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL, err_msg=f"{what}[{name}]")


def check_parity(make_opt, *, own_reg=None, no_clip=(), grad_scale=1.0, scheduler=None):
    """Train natively and with train.optim from the same start; compare params and state."""
    with paddle.utils.unique_name.guard():
        params = make_params(own_reg=own_reg, no_clip=no_clip)
        opt = make_opt(params)
        config = optimizer_config(opt)
        first_step = schedule_state(scheduler) if scheduler is not None else 0
        start = snapshot(params)
        grads_seq = grad_sequence(scale=grad_scale)
        ours, state = run_ours(config, start, optim.init_state(config, start), grads_seq, first_step)
        run_native(opt, params, grads_seq, scheduler)
    assert_trees_close(ours, snapshot(params), "params")
    theirs_state, theirs_step = from_paddle_state_dict(config, opt.state_dict())
    assert_trees_close(state, theirs_state, "state")
    if scheduler is not None:
        assert theirs_step == first_step + STEPS
    return config


def only_trainable_decay(name):
    return name != "nodecay"


P = paddle.optimizer
REG = paddle.regularizer
OPTIMIZERS = {
    "sgd": lambda ps: P.SGD(0.1, parameters=ps),
    "sgd_l2": lambda ps: P.SGD(0.1, parameters=ps, weight_decay=0.05),
    "momentum": lambda ps: P.Momentum(0.05, momentum=0.9, parameters=ps),
    "momentum_nesterov": lambda ps: P.Momentum(0.05, momentum=0.8, use_nesterov=True, parameters=ps),
    "momentum_l2_fused": lambda ps: P.Momentum(0.05, parameters=ps, weight_decay=REG.L2Decay(0.1)),
    "momentum_l1": lambda ps: P.Momentum(0.05, parameters=ps, weight_decay=REG.L1Decay(0.02)),
    "adam": lambda ps: P.Adam(0.01, parameters=ps),
    "adam_betas_eps": lambda ps: P.Adam(0.02, beta1=0.8, beta2=0.95, epsilon=1e-3, parameters=ps),
    "adam_amsgrad": lambda ps: P.Adam(0.01, parameters=ps, amsgrad=True),
    "adam_l2": lambda ps: P.Adam(0.01, parameters=ps, weight_decay=0.1),
    "adam_l1": lambda ps: P.Adam(0.01, parameters=ps, weight_decay=REG.L1Decay(0.05)),
    "adamw": lambda ps: P.AdamW(0.01, parameters=ps, weight_decay=0.1),
    "adamw_exclude": lambda ps: P.AdamW(
        0.01, parameters=ps, weight_decay=0.2, apply_decay_param_fun=only_trainable_decay
    ),
    "adamw_amsgrad_named": lambda ps: P.AdamW(0.01, parameters=ps, amsgrad=True, name="opt"),
    "lamb": lambda ps: P.Lamb(0.01, parameters=ps),
    "lamb_exclude": lambda ps: P.Lamb(
        0.01, lamb_weight_decay=0.1, parameters=ps, exclude_from_weight_decay_fn=lambda p: p.name == "nodecay"
    ),
    "lamb_no_decay": lambda ps: P.Lamb(0.01, lamb_weight_decay=0.0, parameters=ps),
    "lamb_always_adapt": lambda ps: P.Lamb(0.01, lamb_weight_decay=0.0, always_adapt=True, parameters=ps),
    "adagrad": lambda ps: P.Adagrad(0.1, parameters=ps),
    "adagrad_initial": lambda ps: P.Adagrad(0.1, epsilon=1e-4, initial_accumulator_value=0.3, parameters=ps),
    "rmsprop": lambda ps: P.RMSProp(0.01, parameters=ps),
    "rmsprop_centered_momentum": lambda ps: P.RMSProp(0.01, rho=0.9, momentum=0.7, centered=True, parameters=ps),
    "adamax": lambda ps: P.Adamax(0.02, parameters=ps),
    "adamax_l2": lambda ps: P.Adamax(0.02, beta1=0.8, parameters=ps, weight_decay=0.05),
}


@pytest.mark.parametrize("case", sorted(OPTIMIZERS))
def test_optimizer_matches_paddle(case):
    check_parity(OPTIMIZERS[case])


# A parameter's own ParamAttr regularizer wins over the optimizer's (and is appended even for
# AdamW/Lamb, whose weight decay is decoupled).
OWN_REG_CASES = {
    "sgd_own_l1": (lambda ps: P.SGD(0.1, parameters=ps, weight_decay=0.05), REG.L1Decay(0.1)),
    "momentum_own_l2": (lambda ps: P.Momentum(0.05, parameters=ps, weight_decay=REG.L1Decay(0.02)), REG.L2Decay(0.3)),
    "momentum_own_l1": (lambda ps: P.Momentum(0.05, parameters=ps, weight_decay=0.1), REG.L1Decay(0.2)),
    "adam_own_l2": (lambda ps: P.Adam(0.01, parameters=ps), REG.L2Decay(0.2)),
    "adamw_own_l1": (lambda ps: P.AdamW(0.01, parameters=ps), REG.L1Decay(0.1)),
    "rmsprop_own_l2": (lambda ps: P.RMSProp(0.01, parameters=ps, weight_decay=REG.L1Decay(0.01)), REG.L2Decay(0.2)),
}


@pytest.mark.parametrize("case", sorted(OWN_REG_CASES))
def test_param_regularizer_matches_paddle(case):
    make_opt, own = OWN_REG_CASES[case]
    config = check_parity(make_opt, own_reg=own)
    assert type(config.settings("b").regularizer).__name__ == type(own).__name__


CLIPS = {
    "global_norm": lambda: paddle.nn.ClipGradByGlobalNorm(1.5),
    "global_norm_skip": lambda: paddle.nn.ClipGradByGlobalNorm(20.0, auto_skip_clip=True),
    "norm": lambda: paddle.nn.ClipGradByNorm(1.0),
    "value": lambda: paddle.nn.ClipGradByValue(0.5),
    "value_asym": lambda: paddle.nn.ClipGradByValue(max=0.8, min=-0.3),
}
CLIPPED_OPTIMIZERS = {
    "sgd_l2": lambda ps, c: P.SGD(0.1, parameters=ps, weight_decay=0.05, grad_clip=c),
    "momentum_l2": lambda ps, c: P.Momentum(0.05, parameters=ps, weight_decay=0.1, grad_clip=c),
    "adam_l1": lambda ps, c: P.Adam(0.01, parameters=ps, weight_decay=REG.L1Decay(0.05), grad_clip=c),
    "adamw": lambda ps, c: P.AdamW(0.01, parameters=ps, grad_clip=c),
    "lamb": lambda ps, c: P.Lamb(0.01, parameters=ps, grad_clip=c),
}


@pytest.mark.parametrize("clip", sorted(CLIPS))
@pytest.mark.parametrize("opt", sorted(CLIPPED_OPTIMIZERS))
def test_clip_then_regularize_matches_paddle(opt, clip):
    # NOTE: gradients of size ~3 so every clip kind bites; 'w' opts out of clipping.
    check_parity(lambda ps: CLIPPED_OPTIMIZERS[opt](ps, CLIPS[clip]()), no_clip=("w",), grad_scale=3.0)


SCHEDULED = {
    "adam_step": lambda: (P.lr.StepDecay(0.02, step_size=4, gamma=0.5), P.Adam),
    "momentum_cosine": lambda: (P.lr.CosineAnnealingDecay(0.05, T_max=5), P.Momentum),
    "adamw_warmup_cosine": lambda: (P.lr.LinearWarmup(P.lr.CosineAnnealingDecay(0.02, 8), 4, 0.0, 0.02), P.AdamW),
    "lamb_onecycle": lambda: (P.lr.OneCycleLR(0.05, total_steps=20), P.Lamb),
    "sgd_piecewise": lambda: (P.lr.PiecewiseDecay([3, 7], [0.1, 0.05, 0.01]), P.SGD),
    "rmsprop_lambda": lambda: (P.lr.LambdaDecay(0.01, lambda e: 0.9**e), P.RMSProp),
}


@pytest.mark.parametrize("case", sorted(SCHEDULED))
def test_lr_scheduler_drives_optimizer(case):
    scheduler, cls = SCHEDULED[case]()
    scheduler.step()  # NOTE: start mid-schedule, from last_epoch 1
    check_parity(lambda ps: cls(learning_rate=scheduler, parameters=ps), scheduler=scheduler)


def test_param_groups_match_paddle():
    def make(ps):
        by_name = {p.name: p for p in ps}
        groups = [
            {"params": [by_name["w"], by_name["b"], by_name["frozen"]]},
            {"params": [by_name["half"], by_name["nodecay"]], "beta1": 0.7, "learning_rate": 0.3, "weight_decay": 0.05},
        ]
        return P.Adam(0.01, parameters=groups, weight_decay=0.01, grad_clip=paddle.nn.ClipGradByGlobalNorm(2.0))

    config = check_parity(make, grad_scale=2.0)
    assert config.rule_of("half").beta1 == pytest.approx(0.7) and config.settings("w").rule is None


def test_momentum_groups_fuse_their_own_l2():
    def make(ps):
        return P.Momentum(
            0.05,
            weight_decay=0.01,
            parameters=[{"params": ps[:2]}, {"params": ps[2:], "weight_decay": 0.2, "momentum": 0.5}],
        )

    check_parity(make)


def test_round_trip_to_native_paddle_and_back():
    """Train ours 6 steps, hand the state to a fresh native optimizer, continue both 6 steps."""
    grads_seq = grad_sequence(seed=3)
    with paddle.utils.unique_name.guard():
        params = make_params(seed=2)
        scheduler = P.lr.LinearWarmup(P.lr.CosineAnnealingDecay(0.02, 6), 3, 0.001, 0.02)
        config = optimizer_config(
            P.AdamW(scheduler, parameters=params, amsgrad=True, apply_decay_param_fun=only_trainable_decay)
        )
    start = snapshot(params)
    mid, state = run_ours(config, start, optim.init_state(config, start), grads_seq[:6])
    end, end_state = run_ours(config, mid, state, grads_seq[6:], first_step=6)

    with paddle.utils.unique_name.guard():
        native = make_params(seed=2)
        for p in native:
            p.set_value(np.asarray(mid[p.name]))
        native_scheduler = P.lr.LinearWarmup(P.lr.CosineAnnealingDecay(0.02, 6), 3, 0.001, 0.02)
        opt = P.AdamW(native_scheduler, parameters=native, amsgrad=True, apply_decay_param_fun=only_trainable_decay)
        opt.set_state_dict(to_paddle_state_dict(config, state, mid, schedule_state=6))
        assert native_scheduler.last_epoch == 6
        run_native(opt, native, grads_seq[6:], native_scheduler)
    assert_trees_close(end, snapshot(native), "params")
    theirs, step = from_paddle_state_dict(config, opt.state_dict())
    assert_trees_close(end_state, theirs, "state")
    assert step == 12


def test_state_dict_layout_matches_paddle():
    with paddle.utils.unique_name.guard():
        params = make_params()
        opt = P.Adam(P.lr.StepDecay(0.01, 3), parameters=params, name="enc")
        config = optimizer_config(opt)
        run_native(opt, params, grad_sequence(steps=1))
        native = opt.state_dict()
    ours = to_paddle_state_dict(config, optim.init_state(config, snapshot(params)), schedule_state=0)
    assert set(ours) == set(native)
    assert "w_enc_moment1_0" in ours and "frozen_enc_moment1_0" not in ours
    for key, value in ours.items():
        if key != "LR_Scheduler":
            assert tuple(value.shape) == tuple(native[key].shape), key


def test_fresh_state_when_paddle_has_not_stepped():
    params = make_params()
    config = optimizer_config(P.Adam(0.01, parameters=params))
    start = snapshot(params)
    state, step = from_paddle_state_dict(config, {}, start)
    assert_trees_close(state, optim.init_state(config, start), "state")
    assert step is None


def test_config_settings_read_from_paddle():
    params = make_params(no_clip=("w",))
    config = optimizer_config(
        P.AdamW(
            0.01,
            parameters=params,
            weight_decay=0.3,
            apply_decay_param_fun=only_trainable_decay,
            grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0),
        )
    )
    s = config.settings
    assert config.kind == "adamw" and config.rule.weight_decay == pytest.approx(0.3)
    assert s("half").lr_scale == 0.5 and s("w").lr_scale == 1.0
    assert not s("frozen").trainable and "frozen" not in config.trainable()
    assert not s("nodecay").apply_decay and s("w").apply_decay
    assert not s("w").need_clip and s("b").need_clip
    assert config.grad_clip == clip_lib.ClipGradByGlobalNorm(1.0)


def test_config_is_hashable_and_serialisable():
    params = make_params(own_reg=REG.L1Decay(0.1))
    scheduler = P.lr.LinearWarmup(P.lr.StepDecay(0.1, 2), 3, 0.0, 0.1)
    config = optimizer_config(
        P.Momentum(
            scheduler, parameters=params, weight_decay=0.1, use_nesterov=True, grad_clip=paddle.nn.ClipGradByValue(1.0)
        )
    )
    hash(config)
    again = optim.config_from_dict(optim.config_to_dict(config))
    assert again == config
    assert again.settings("b").regularizer == optim.L1Decay(pytest.approx(0.1))
    start = snapshot(params)
    grads = {n: jnp.ones(s) for n, s in SHAPES.items() if n != "frozen"}
    jitted = jax.jit(optim.apply, static_argnums=0)
    state = optim.init_state(config, start)
    np.testing.assert_allclose(
        jitted(config, start, grads, state, 0.1)[0]["w"],
        optim.apply(again, start, grads, state, 0.1)[0]["w"],
        rtol=RTOL,
    )


def test_frozen_and_unknown_params_pass_through():
    params = make_params()
    config = optimizer_config(P.SGD(0.1, parameters=params))
    start = {**snapshot(params), "buffer": jnp.ones(3)}
    grads = {n: jnp.ones(s) for n, s in SHAPES.items() if n != "frozen"}
    new, _ = optim.apply(config, start, grads, optim.init_state(config, start), 0.1)
    assert new["frozen"] is start["frozen"] and new["buffer"] is start["buffer"]
    with pytest.raises(optim.TrainingError, match="missing"):
        optim.apply(config, start, {"w": grads["w"]}, {}, 0.1)


def test_unsupported_optimizer_is_named():
    with pytest.raises(optim.TrainingError, match="Adadelta"):
        optimizer_config(P.Adadelta(0.1, parameters=make_params()))


@pytest.mark.parametrize("module", ["optim.py", "lr.py", "clip.py", "__init__.py"])
def test_train_modules_never_import_paddle(module):
    path = pathlib.Path(optim.__file__).with_name(module)
    tree = ast.parse(path.read_text())
    imported = [
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in (n.names if isinstance(n, ast.Import) else [n])
        if not (isinstance(n, ast.ImportFrom) and n.level > 0)
    ]
    assert not [m for m in imported if m and m.split(".")[0] == "paddle"]


def _one_step(rule, settings, grads, lr=0.1):
    config = optim.OptimizerConfig(rule=rule, params=(("w", settings),))
    params = {"w": jnp.linspace(-1.0, 1.0, 6, dtype=jnp.float32)}
    state = optim.init_state(config, params)
    return optim.apply(config, params, {"w": grads}, state, lr)[0]["w"]


def test_momentum_rescale_grad_follows_the_gpu_kernel():
    # NOTE: Paddle's CPU momentum kernel ignores rescale_grad; its GPU kernel (and ours) scales g.
    g = jnp.arange(6, dtype=jnp.float32)
    scaled = _one_step(optim.Momentum(rescale_grad=2.0), optim.ParamSettings(), g)
    np.testing.assert_array_equal(scaled, _one_step(optim.Momentum(), optim.ParamSettings(), 2 * g))


def test_adamw_lr_ratio_scales_the_whole_step():
    # NOTE: Paddle implements lr_ratio on GPU only (its CPU AdamW raises): lr * lr_ratio everywhere.
    g = jnp.arange(6, dtype=jnp.float32)
    ratio = _one_step(optim.AdamW(weight_decay=0.3), optim.ParamSettings(lr_ratio=0.25), g, lr=0.2)
    np.testing.assert_allclose(
        ratio, _one_step(optim.AdamW(weight_decay=0.3), optim.ParamSettings(), g, lr=0.05), rtol=1e-7
    )


def test_apply_with_its_config_bound_jits_as_the_training_step_calls_it():
    params = make_params()
    config = optimizer_config(P.Adam(0.01, parameters=params))
    update = functools.partial(optim.apply, config)  # NOTE: as runtime/step_runner.py builds it
    start = snapshot(params)
    grads = {n: jnp.ones(s) for n, s in SHAPES.items()}
    new, state = jax.jit(update)(start, grads, optim.init_state(config, start), 0.01)
    assert set(state) == set(config.trainable()) and float(state["w"]["beta1_pow_acc"][0]) == pytest.approx(0.81)
