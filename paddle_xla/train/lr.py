"""Learning-rate schedules with the exact numbers of `paddle.optimizer.lr`, without Paddle.

A schedule is a frozen dataclass holding a Paddle scheduler's constructor arguments (Paddle's
names and defaults). Its only state is Paddle's step counter, `last_epoch`: a freshly built Paddle
scheduler has `last_epoch == 0`, and each `scheduler.step()` adds one. So the learning rate the
optimizer uses at a step is `schedule.lr_at(last_epoch)`.

- `lr_at(step)` is a host float, computed with the same float64 arithmetic, in the same order,
  as Paddle's `get_lr`, so it equals `scheduler.last_lr` bit for bit. Recursive schedules
  (CosineAnnealingDecay, LinearLR, CosineAnnealingWarmRestarts) replay Paddle's recursion from
  step 0 (memoised), because the recursion and the closed form differ in the last bits. The
  training step asks it on the host for every step it runs (a device loop of several steps is
  fed their learning rates as an array), so the device never evaluates a schedule.
- `explicit_lr_at(step)` is the lr after Paddle's `scheduler.step(epoch=step)`, as LinearWarmup
  steps the schedule it wraps.
- `paddle_state(step)` is the dict Paddle's `scheduler.state_dict()` holds at that step, and
  `to_dict()` / `schedule_from_dict()` serialise a schedule for checkpoints.

Host-evaluated schedules (`host_only`): LambdaDecay and MultiplicativeDecay call a user's Python
function at every step, and their function is not serialised (pass it again to
`schedule_from_dict`), so a train artifact cannot carry them. ReduceOnPlateau depends on a metric
the host sees after each step: its lr lives in a `PlateauState`, advanced on the host by
`plateau_step(schedule, state, metric)`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar


class Schedule:
    """Base of every schedule: a frozen dataclass of a Paddle scheduler's arguments."""

    paddle_name: ClassVar[str]
    host_only: ClassVar[bool] = False  # True: needs a Python callable on the host each step

    def lr_at(self, step: int) -> float:
        raise NotImplementedError

    def explicit_lr_at(self, step: int) -> float:
        """The lr after Paddle's `scheduler.step(epoch=step)` (LinearWarmup steps its inner schedule so)."""
        return self.lr_at(step)

    def paddle_state(self, step: int) -> dict:
        return {"last_epoch": int(step), "last_lr": self.lr_at(step)}

    def to_dict(self) -> dict:
        return dataclass_to_dict(self)


class _Recursive(Schedule):
    """A schedule whose lr at step t comes from the lr at t-1, replayed from step 0 and memoised."""

    _memo: list  # NOTE: each subclass declares it as its dataclass field (_memo_field)

    def _first(self) -> float:
        raise NotImplementedError

    def _next(self, prev_lr: float, step: int) -> float:
        raise NotImplementedError

    def lr_at(self, step: int) -> float:
        if step < 0:
            raise ValueError(f"{type(self).__name__}: step must be >= 0, got {step}")
        memo = self._memo
        if not memo:
            memo.append(self._first())
        while len(memo) <= step:
            memo.append(self._next(memo[-1], len(memo)))
        return memo[step]


def _memo_field():
    # NOTE: a per-instance cache kept out of eq/hash/repr, so configs stay hashable jit statics.
    return field(default_factory=list, compare=False, hash=False, repr=False)


@dataclass(frozen=True)
class Constant(Schedule):
    """A float learning rate (Paddle's optimizer given `learning_rate=0.01`)."""

    learning_rate: float
    paddle_name: ClassVar[str] = "float"

    def lr_at(self, step):
        return float(self.learning_rate)


@dataclass(frozen=True)
class NoamDecay(Schedule):
    d_model: int
    warmup_steps: int
    learning_rate: float = 1.0
    paddle_name: ClassVar[str] = "NoamDecay"

    def lr_at(self, step):
        a = 1 if step == 0 else step**-0.5
        b = self.warmup_steps**-1.5 * step
        return self.learning_rate * (self.d_model**-0.5) * min(a, b)


@dataclass(frozen=True)
class PiecewiseDecay(Schedule):
    boundaries: tuple[int, ...]
    values: tuple[float, ...]
    paddle_name: ClassVar[str] = "PiecewiseDecay"

    def __post_init__(self):
        _freeze_seq(self, "boundaries", "values")

    def lr_at(self, step):
        for boundary, value in zip(self.boundaries, self.values):
            if step < boundary:
                return value
        return self.values[-1]


@dataclass(frozen=True)
class NaturalExpDecay(Schedule):
    learning_rate: float
    gamma: float
    paddle_name: ClassVar[str] = "NaturalExpDecay"

    def lr_at(self, step):
        return self.learning_rate * math.exp(-1 * self.gamma * step)


@dataclass(frozen=True)
class InverseTimeDecay(Schedule):
    learning_rate: float
    gamma: float
    paddle_name: ClassVar[str] = "InverseTimeDecay"

    def lr_at(self, step):
        return self.learning_rate / (1 + self.gamma * step)


@dataclass(frozen=True)
class PolynomialDecay(Schedule):
    learning_rate: float
    decay_steps: int
    end_lr: float = 0.0001
    power: float = 1.0
    cycle: bool = False
    paddle_name: ClassVar[str] = "PolynomialDecay"

    def lr_at(self, step):
        epoch, decay_steps = step, self.decay_steps
        if self.cycle:
            div = 1 if step == 0 else math.ceil(float(step) / float(self.decay_steps))
            decay_steps = self.decay_steps * div
        else:
            epoch = min(step, self.decay_steps)
        frac = 1 - float(epoch) / float(decay_steps)
        return (self.learning_rate - self.end_lr) * (frac**self.power) + self.end_lr


@dataclass(frozen=True)
class ExponentialDecay(Schedule):
    learning_rate: float
    gamma: float
    paddle_name: ClassVar[str] = "ExponentialDecay"

    def lr_at(self, step):
        return self.learning_rate * (self.gamma**step)


@dataclass(frozen=True)
class MultiStepDecay(Schedule):
    learning_rate: float
    milestones: tuple[int, ...]
    gamma: float = 0.1
    paddle_name: ClassVar[str] = "MultiStepDecay"

    def __post_init__(self):
        _freeze_seq(self, "milestones")

    def lr_at(self, step):
        passed = next((i for i, m in enumerate(self.milestones) if step < m), len(self.milestones))
        return self.learning_rate * (self.gamma**passed)


@dataclass(frozen=True)
class StepDecay(Schedule):
    learning_rate: float
    step_size: int
    gamma: float = 0.1
    paddle_name: ClassVar[str] = "StepDecay"

    def lr_at(self, step):
        return self.learning_rate * (self.gamma ** (step // self.step_size))


@dataclass(frozen=True)
class CosineAnnealingDecay(_Recursive):
    """Paddle steps this one recursively (lr_t from lr_{t-1}); `lr_at` replays that recursion."""

    learning_rate: float
    T_max: int
    eta_min: float = 0.0
    _memo: list = _memo_field()
    paddle_name: ClassVar[str] = "CosineAnnealingDecay"

    def _first(self):
        return float(self.learning_rate)

    def _next(self, prev, step):
        base, eta, t_max = self.learning_rate, float(self.eta_min), self.T_max
        if (step - 1 - t_max) % (2 * t_max) == 0:
            return prev + (base - eta) * (1 - math.cos(math.pi / t_max)) / 2
        ratio = (1 + math.cos(math.pi * step / t_max)) / (1 + math.cos(math.pi * (step - 1) / t_max))
        return ratio * (prev - eta) + eta

    def explicit_lr_at(self, step):
        # NOTE: `step(epoch)` takes Paddle's closed form, not the recursion.
        eta = float(self.eta_min)
        return eta + (self.learning_rate - eta) * (1 + math.cos(math.pi * step / self.T_max)) / 2


@dataclass(frozen=True)
class LinearLR(_Recursive):
    learning_rate: float
    total_steps: int
    start_factor: float = 1.0 / 3
    end_factor: float = 1.0
    _memo: list = _memo_field()
    paddle_name: ClassVar[str] = "LinearLR"

    def _first(self):
        return self.learning_rate * self.start_factor

    def _next(self, prev, step):
        if step > self.total_steps:
            return prev
        base = self.total_steps * self.start_factor
        change = self.end_factor - self.start_factor
        return prev * (1.0 + change / (base + (step - 1) * change))


@dataclass(frozen=True)
class CosineAnnealingWarmRestarts(Schedule):
    learning_rate: float
    T_0: int
    T_mult: int = 1
    eta_min: float = 0.0
    _memo: list = _memo_field()  # (T_cur, T_i) per step, replaying Paddle's counters
    paddle_name: ClassVar[str] = "CosineAnnealingWarmRestarts"

    def _cosine(self, t_cur, t_i):
        return self.eta_min + (self.learning_rate - self.eta_min) * (1 + math.cos(math.pi * t_cur / t_i)) / 2

    def lr_at(self, step):
        memo = self._memo
        if not memo:
            memo.append((0, self.T_0))
        while len(memo) <= step:
            t_cur, t_i = memo[-1]
            t_cur += 1
            if t_cur >= t_i:
                t_cur, t_i = t_cur - t_i, t_i * self.T_mult
            memo.append((t_cur, t_i))
        return self._cosine(*memo[step])

    def explicit_lr_at(self, step):
        if step < self.T_0:
            return self._cosine(step, self.T_0)
        if self.T_mult == 1:
            return self._cosine(step % self.T_0, self.T_0)
        n = int(math.log((step / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
        t_cur = step - self.T_0 * (self.T_mult**n - 1) / (self.T_mult - 1)
        return self._cosine(t_cur, self.T_0 * self.T_mult**n)


@dataclass(frozen=True)
class OneCycleLR(Schedule):
    max_learning_rate: float
    total_steps: int
    divide_factor: float = 25.0
    end_learning_rate: float = 0.0001
    phase_pct: float = 0.3
    anneal_strategy: str = "cos"
    three_phase: bool = False
    paddle_name: ClassVar[str] = "OneCycleLR"

    def _phases(self):
        """Paddle's (_step_config, _steps_size, _lr_config)."""
        initial, total, pct = self.max_learning_rate / float(self.divide_factor), self.total_steps, self.phase_pct
        if self.three_phase:
            ends = [0, pct * total - 1, 2 * pct * total - 2, total - 1, total - 1]
            sizes = [ends[1] - ends[0], ends[2] - ends[1], ends[3] - ends[2], ends[3] - ends[2]]
            lrs = [initial, self.max_learning_rate, initial, float(self.end_learning_rate)]
        else:
            ends = [0, pct * total - 1, total - 1, total - 1]
            sizes = [ends[1] - ends[0], ends[2] - ends[1], ends[2] - ends[1]]
            lrs = [initial, self.max_learning_rate, float(self.end_learning_rate)]
        return ends, sizes, lrs

    def _anneal(self, start, end, pct, cos):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def lr_at(self, step):
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR stepped {step} times, more than total_steps={self.total_steps}")
        ends, sizes, lrs = self._phases()
        for i, (end, size) in enumerate(zip(ends[1:], sizes)):
            if step <= end or i == len(lrs) - 2:
                return self._anneal(lrs[i], lrs[i + 1], (step - ends[i]) / size, math.cos)


@dataclass(frozen=True)
class CyclicLR(Schedule):
    """CyclicLR with its built-in modes (a custom `scale_fn` is not supported)."""

    base_learning_rate: float
    max_learning_rate: float
    step_size_up: int
    step_size_down: int | None = None
    mode: str = "triangular"
    exp_gamma: float = 1.0
    paddle_name: ClassVar[str] = "CyclicLR"

    def _shape(self):
        up = float(self.step_size_up)
        down = float(self.step_size_down) if self.step_size_down is not None else up
        return up + down, up / (up + down)

    def _scale(self, cycle, iterations):
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (cycle - 1))
        return self.exp_gamma**iterations

    def lr_at(self, step):
        cycle_size, up_pct = self._shape()
        cycle = 1 + step // cycle_size
        pct = 1.0 + step / cycle_size - cycle
        factor = pct / up_pct if pct <= up_pct else (1 - pct) / (1 - up_pct)
        height = (self.max_learning_rate - self.base_learning_rate) * factor
        return self.base_learning_rate + height * self._scale(cycle, step)


@dataclass(frozen=True)
class LinearWarmup(Schedule):
    """Linear warmup, then a float or another schedule (stepped with `step(epoch)`, as Paddle does)."""

    learning_rate: float | Schedule
    warmup_steps: int
    start_lr: float
    end_lr: float
    paddle_name: ClassVar[str] = "LinearWarmup"

    @property
    def host_only(self):
        return isinstance(self.learning_rate, Schedule) and self.learning_rate.host_only

    def lr_at(self, step):
        if step < self.warmup_steps:
            return (self.end_lr - self.start_lr) * float(step) / float(self.warmup_steps) + self.start_lr
        if isinstance(self.learning_rate, Schedule):
            return self.learning_rate.explicit_lr_at(step - self.warmup_steps)
        return self.learning_rate

    def paddle_state(self, step):
        state = super().paddle_state(step)
        inner = self.learning_rate
        if isinstance(inner, Schedule):
            # NOTE: the inner scheduler is stepped only after warmup; before, it sits at its start.
            inner_step = max(step - self.warmup_steps, 0)
            state["LinearWarmup_LR"] = {"last_epoch": inner_step, "last_lr": inner.explicit_lr_at(inner_step)}
        return state


@dataclass(frozen=True)
class LambdaDecay(Schedule):
    """Host-evaluated: `lr_lambda(step)` runs in Python on the host at every step."""

    learning_rate: float
    lr_lambda: Callable[[int], float]
    paddle_name: ClassVar[str] = "LambdaDecay"
    host_only: ClassVar[bool] = True

    def lr_at(self, step):
        return self.learning_rate * self.lr_lambda(step)


@dataclass(frozen=True)
class MultiplicativeDecay(_Recursive):
    """Host-evaluated: lr_t = lr_{t-1} * lr_lambda(t), with `lr_lambda` run in Python on the host."""

    learning_rate: float
    lr_lambda: Callable[[int], float]
    _memo: list = _memo_field()
    paddle_name: ClassVar[str] = "MultiplicativeDecay"
    host_only: ClassVar[bool] = True

    def _first(self):
        return float(self.learning_rate)

    def _next(self, prev, step):
        return prev * self.lr_lambda(step)


@dataclass(frozen=True)
class ReduceOnPlateau(Schedule):
    """Host-evaluated from a metric: see `PlateauState` and `plateau_step`."""

    learning_rate: float
    mode: str = "min"
    factor: float = 0.1
    patience: int = 10
    threshold: float = 1e-4
    threshold_mode: str = "rel"
    cooldown: int = 0
    min_lr: float = 0.0
    epsilon: float = 1e-8
    paddle_name: ClassVar[str] = "ReduceOnPlateau"
    host_only: ClassVar[bool] = True

    def lr_at(self, step):
        raise TypeError(
            "ReduceOnPlateau's lr depends on the metrics seen so far: use "
            "plateau_step(schedule, state, metric) and state.last_lr"
        )

    def paddle_state(self, state: PlateauState):  # type: ignore[override]  # NOTE: its state, not a step
        return dataclasses.asdict(state)

    def is_better(self, current, best) -> bool:
        if self.mode == "min":
            rel = best - best * self.threshold if self.threshold_mode == "rel" else best - self.threshold
            return current < rel
        rel = best + best * self.threshold if self.threshold_mode == "rel" else best + self.threshold
        return current > rel


@dataclass(frozen=True)
class PlateauState:
    """ReduceOnPlateau's state, with the keys of its Paddle `state_dict()`."""

    cooldown_counter: int = 0
    best: float | None = None
    num_bad_epochs: int = 0
    last_epoch: int = 0
    last_lr: float = 0.0


def plateau_start(schedule: ReduceOnPlateau) -> PlateauState:
    return PlateauState(last_lr=float(schedule.learning_rate))


def plateau_step(schedule: ReduceOnPlateau, state: PlateauState, metric: float) -> PlateauState:
    """Paddle's `ReduceOnPlateau.step(metric)`, on the host."""
    metric = float(metric)
    new = dataclasses.replace(state, last_epoch=state.last_epoch + 1)
    if new.cooldown_counter > 0:
        return dataclasses.replace(new, cooldown_counter=new.cooldown_counter - 1)
    if new.best is None or schedule.is_better(metric, new.best):
        new = dataclasses.replace(new, best=metric, num_bad_epochs=0)
    else:
        new = dataclasses.replace(new, num_bad_epochs=new.num_bad_epochs + 1)
    if new.num_bad_epochs > schedule.patience:
        new = dataclasses.replace(new, cooldown_counter=schedule.cooldown, num_bad_epochs=0)
        lower = max(new.last_lr * schedule.factor, schedule.min_lr)
        if new.last_lr - lower > schedule.epsilon:
            new = dataclasses.replace(new, last_lr=lower)
    return new


SCHEDULES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        Constant,
        NoamDecay,
        PiecewiseDecay,
        NaturalExpDecay,
        InverseTimeDecay,
        PolynomialDecay,
        ExponentialDecay,
        MultiStepDecay,
        StepDecay,
        CosineAnnealingDecay,
        LinearLR,
        CosineAnnealingWarmRestarts,
        OneCycleLR,
        CyclicLR,
        LinearWarmup,
        LambdaDecay,
        MultiplicativeDecay,
        ReduceOnPlateau,
    )
}


def schedule_from_dict(d: dict, *, lr_lambda: Callable | None = None) -> Schedule:
    """Rebuild a schedule from `to_dict()`. A host-evaluated one needs its `lr_lambda` again."""
    schedule = dataclass_from_dict(d, SCHEDULES, lr_lambda=lr_lambda)
    if getattr(schedule, "lr_lambda", 0) is None:
        raise ValueError(
            f"{type(schedule).__name__} needs its lr_lambda: pass lr_lambda=... (Python functions are not serialised)"
        )
    return schedule


def as_schedule(learning_rate: float | Schedule) -> Schedule:
    return learning_rate if isinstance(learning_rate, Schedule) else Constant(float(learning_rate))


# -- serialisation shared by the train/ configs ------------------------------------------------


def dataclass_to_dict(obj: Any) -> Any:
    """A JSON-friendly dict of a (nested) frozen config dataclass, tagged with its class name.

    Callables are not serialised (stored as None); memo caches are skipped."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {"type": type(obj).__name__}
        for f in dataclasses.fields(obj):
            if f.compare:
                out[f.name] = dataclass_to_dict(getattr(obj, f.name))
        return out
    if isinstance(obj, (tuple, list)):
        return [dataclass_to_dict(x) for x in obj]
    if callable(obj):
        return None
    return obj


def dataclass_from_dict(d: Any, classes: dict[str, type], **callables) -> Any:
    """The inverse of `dataclass_to_dict` for classes in `classes`; None fields named in
    `callables` are filled from it."""
    if isinstance(d, list):
        return tuple(dataclass_from_dict(x, classes, **callables) for x in d)
    if not (isinstance(d, dict) and "type" in d):
        return d
    cls = classes.get(d["type"])
    if cls is None:
        raise ValueError(f"unknown config type {d['type']!r}; known: {sorted(classes)}")
    kwargs = {k: dataclass_from_dict(v, classes, **callables) for k, v in d.items() if k != "type"}
    for name, fn in callables.items():
        if name in kwargs and kwargs[name] is None:
            kwargs[name] = fn
    return cls(**kwargs)


def _freeze_seq(obj, *names):
    # NOTE: lists become tuples so the dataclass stays hashable (a jit static argument).
    for name in names:
        object.__setattr__(obj, name, tuple(getattr(obj, name)))
