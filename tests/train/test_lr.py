"""train.lr against paddle.optimizer.lr: the lr of every step, as Paddle's scheduler.step() gives it,
for every schedule class and every one of its arguments; each expected value is Paddle's own."""

import dataclasses

import numpy as np
import paddle
import pytest

from paddle_xla.interop.paddle_optimizer import schedule_config, schedule_state
from paddle_xla.train import lr as lr_lib

S = paddle.optimizer.lr
STEPS = 60

SCHEDULERS = {
    "noam": lambda: S.NoamDecay(d_model=64, warmup_steps=10, learning_rate=2.0),
    "piecewise": lambda: S.PiecewiseDecay([5, 20, 40], [0.1, 0.05, 0.01, 0.001]),
    "natural_exp": lambda: S.NaturalExpDecay(0.1, gamma=0.05),
    "inverse_time": lambda: S.InverseTimeDecay(0.1, gamma=0.3),
    "polynomial": lambda: S.PolynomialDecay(0.1, decay_steps=25, end_lr=0.001, power=2.0),
    "polynomial_cycle": lambda: S.PolynomialDecay(0.1, decay_steps=13, end_lr=0.002, power=0.5, cycle=True),
    "exponential": lambda: S.ExponentialDecay(0.1, gamma=0.93),
    "multistep": lambda: S.MultiStepDecay(0.1, milestones=[7, 19, 33], gamma=0.3),
    "step": lambda: S.StepDecay(0.1, step_size=9, gamma=0.7),
    "cosine": lambda: S.CosineAnnealingDecay(0.1, T_max=17),
    "cosine_eta_min": lambda: S.CosineAnnealingDecay(0.1, T_max=11, eta_min=0.01),
    "linear_lr": lambda: S.LinearLR(0.1, total_steps=23, start_factor=0.2, end_factor=0.9),
    "warm_restarts": lambda: S.CosineAnnealingWarmRestarts(0.1, T_0=7),
    "warm_restarts_mult": lambda: S.CosineAnnealingWarmRestarts(0.1, T_0=5, T_mult=2, eta_min=0.001),
    "onecycle": lambda: S.OneCycleLR(0.1, total_steps=STEPS),
    "onecycle_linear_three": lambda: S.OneCycleLR(
        0.3,
        total_steps=STEPS + 7,
        divide_factor=7.0,
        end_learning_rate=0.002,
        phase_pct=0.35,
        anneal_strategy="linear",
        three_phase=True,
    ),
    "cyclic": lambda: S.CyclicLR(0.01, 0.1, step_size_up=6),
    "cyclic_triangular2": lambda: S.CyclicLR(0.01, 0.1, step_size_up=4, step_size_down=9, mode="triangular2"),
    "cyclic_exp_range": lambda: S.CyclicLR(0.01, 0.1, step_size_up=5, mode="exp_range", exp_gamma=0.97),
    "warmup_float": lambda: S.LinearWarmup(0.1, warmup_steps=10, start_lr=0.0, end_lr=0.1),
    "warmup_cosine": lambda: S.LinearWarmup(S.CosineAnnealingDecay(0.1, T_max=20), 8, 0.01, 0.1),
    "warmup_step": lambda: S.LinearWarmup(S.StepDecay(0.1, step_size=5), 5, 0.0, 0.1),
    "warmup_linear_lr": lambda: S.LinearWarmup(S.LinearLR(0.1, total_steps=15), 6, 0.0, 0.05),
    "warmup_restarts": lambda: S.LinearWarmup(S.CosineAnnealingWarmRestarts(0.1, 4, T_mult=2), 3, 0.0, 0.1),
    "warmup_poly_cycle": lambda: S.LinearWarmup(S.PolynomialDecay(0.1, 9, cycle=True), 4, 0.0, 0.1),
    "lambda": lambda: S.LambdaDecay(0.1, lambda e: 0.95**e),
    "multiplicative": lambda: S.MultiplicativeDecay(0.1, lambda e: 0.9 if e % 3 else 1.01),
}
# NOTE: Paddle's CosineAnnealingWarmRestarts keeps T_cur/T_i out of its state_dict, so Paddle itself
# cannot resume it from one (our lr_at replays the counters, so ours is right either way).
PADDLE_CANNOT_RESUME = {"warm_restarts", "warm_restarts_mult"}
PLATEAU_ARGS = [
    dict(mode="min", factor=0.5, patience=2, threshold=0.01, threshold_mode="rel", cooldown=1, min_lr=0.004),
    dict(
        mode="max", factor=0.5, patience=2, threshold=0.01, threshold_mode="abs", cooldown=1, min_lr=0.004, epsilon=1e-3
    ),
]


def paddle_lrs(scheduler, steps=STEPS):
    lrs = [scheduler.last_lr]
    for _ in range(steps):
        scheduler.step()
        lrs.append(scheduler.last_lr)
    return lrs


@pytest.mark.parametrize("case", sorted(SCHEDULERS))
def test_lr_at_equals_paddle(case):
    schedule = schedule_config(SCHEDULERS[case]())
    ours = [schedule.lr_at(step) for step in range(STEPS + 1)]
    assert ours == paddle_lrs(SCHEDULERS[case]())  # NOTE: the same float64 ops: bit-exact


@pytest.mark.parametrize("case", sorted(SCHEDULERS))
def test_explicit_lr_at_equals_paddle_stepped_by_epoch(case):
    """explicit_lr_at(k): Paddle's lr after scheduler.step(epoch=k), as LinearWarmup steps its inner one."""
    scheduler, schedule = SCHEDULERS[case](), schedule_config(SCHEDULERS[case]())
    paddle_by_epoch = []
    for epoch in range(STEPS + 1):
        scheduler.step(epoch=epoch)
        paddle_by_epoch.append(scheduler.last_lr)
    assert [schedule.explicit_lr_at(epoch) for epoch in range(STEPS + 1)] == paddle_by_epoch


def test_every_schedule_class_and_argument_is_compared_with_paddle():
    """Each class of train.lr is read from a Paddle scheduler above, and each of its arguments with a
    default is given another value in at least one case, so a misread argument fails a comparison."""
    schedules = [schedule_config(make()) for make in SCHEDULERS.values()]
    schedules += [schedule_config(0.25)] + [schedule_config(S.ReduceOnPlateau(0.1, **a)) for a in PLATEAU_ARGS]
    schedules += [s.learning_rate for s in schedules if isinstance(getattr(s, "learning_rate", None), lr_lib.Schedule)]
    assert {type(s).__name__ for s in schedules} == set(lr_lib.SCHEDULES)
    untried = {
        (cls, f.name)
        for cls in lr_lib.SCHEDULES.values()
        for f in dataclasses.fields(cls)
        if f.compare and f.default is not dataclasses.MISSING
    }
    for s in schedules:
        untried -= {(type(s), f.name) for f in dataclasses.fields(s) if f.compare and getattr(s, f.name) != f.default}
    assert not untried, sorted((cls.__name__, name) for cls, name in untried)


@pytest.mark.parametrize("case", sorted(SCHEDULERS))
def test_paddle_state_and_set_state_dict(case):
    """paddle_state(step) equals the scheduler's state_dict, and loading it resumes Paddle there."""
    scheduler = SCHEDULERS[case]()
    schedule = schedule_config(scheduler)
    for _ in range(23):
        scheduler.step()
    assert schedule.paddle_state(23) == scheduler.state_dict()
    assert schedule_state(scheduler) == 23
    if case in PADDLE_CANNOT_RESUME:
        return
    resumed = SCHEDULERS[case]()
    resumed.set_state_dict(schedule.paddle_state(23))
    assert paddle_lrs(resumed, 10) == [schedule.lr_at(23 + i) for i in range(11)]


@pytest.mark.parametrize("case", sorted(SCHEDULERS))
def test_to_dict_round_trip(case):
    schedule = schedule_config(SCHEDULERS[case]())
    fn = getattr(schedule, "lr_lambda", None) or getattr(getattr(schedule, "learning_rate", None), "lr_lambda", None)
    again = lr_lib.schedule_from_dict(schedule.to_dict(), lr_lambda=fn)
    assert again == schedule and hash(again) == hash(schedule)
    assert [again.lr_at(s) for s in range(STEPS + 1)] == paddle_lrs(SCHEDULERS[case]())


def test_host_schedule_needs_its_function_back():
    schedule = schedule_config(S.LambdaDecay(0.1, lambda e: 0.5))
    with pytest.raises(ValueError, match="lr_lambda"):
        lr_lib.schedule_from_dict(schedule.to_dict())


@pytest.mark.parametrize("kwargs", PLATEAU_ARGS, ids=["min-rel", "max-abs-epsilon"])
def test_reduce_on_plateau_host_steps(kwargs):
    native = S.ReduceOnPlateau(0.1, **kwargs)
    schedule = schedule_config(S.ReduceOnPlateau(0.1, **kwargs))
    state = lr_lib.plateau_start(schedule)
    metrics = np.random.default_rng(0).uniform(0.8, 1.2, STEPS) * np.linspace(1.0, 0.9, STEPS)
    for metric in metrics:
        native.step(float(metric))
        state = lr_lib.plateau_step(schedule, state, float(metric))
        assert state.last_lr == native.last_lr
    assert schedule.paddle_state(state) == native.state_dict()
    assert schedule_state(native) == state
    with pytest.raises(TypeError, match="plateau_step"):
        schedule.lr_at(0)


def test_schedule_started_mid_way():
    scheduler = S.CosineAnnealingDecay(0.1, T_max=9)
    for _ in range(4):
        scheduler.step()
    schedule, step = schedule_config(scheduler), schedule_state(scheduler)
    assert step == 4 and schedule.lr_at(step) == scheduler.last_lr


def test_onecycle_refuses_the_step_past_the_end_as_paddle_does():
    scheduler, schedule = S.OneCycleLR(0.1, total_steps=10), lr_lib.OneCycleLR(0.1, total_steps=10)
    for _ in range(10):
        scheduler.step()
    assert schedule.lr_at(10) == scheduler.last_lr
    with pytest.raises(ValueError, match="total steps is 10"):
        scheduler.step()
    with pytest.raises(ValueError, match="total_steps=10"):
        schedule.lr_at(11)


def test_a_float_learning_rate_is_paddles_constant():
    net = paddle.nn.Linear(2, 2)
    opt = paddle.optimizer.SGD(0.25, parameters=net.parameters())
    schedule = schedule_config(opt._learning_rate)
    for _ in range(3):
        opt.step()
    assert [schedule.lr_at(step) for step in (0, 3, 1000)] == [opt.get_lr()] * 3
    assert lr_lib.as_schedule(0.25) == schedule and lr_lib.as_schedule(schedule) is schedule
