"""Read a live `paddle.optimizer.Optimizer` into `train.optim.OptimizerConfig`, and move its state
both ways in the layout of `paddle_opt.state_dict()`.

    config = optimizer_config(opt)                       # keyed by param.name, e.g. "linear_0.w_0"
    schedule = schedule_config(scheduler)                # a train.lr schedule; its step: scheduler.last_epoch
    d = to_paddle_state_dict(config, state, params, step)
    opt.set_state_dict(d)                                # continue in native Paddle
    state, step = from_paddle_state_dict(config, opt.state_dict(), params)

Everything Paddle decides per parameter on the host (optimize_attr learning rate, need_clip,
stop_gradient, ParamAttr regularizers, AdamW's apply_decay_param_fun and lr_ratio, Lamb's
exclude_from_weight_decay_fn, parameter groups) is evaluated here, once.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import warnings
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np
import paddle
import paddle.nn as pnn
import paddle.optimizer as popt
import paddle.optimizer.lr as plr
import paddle.regularizer as preg

from ..errors import CheckpointError, TrainingError
from ..train import clip as clip_lib
from ..train import lr as lr_lib
from ..train import optim as optim_lib

# NOTE: exact Paddle classes; a subclass is read as its nearest one here only if it leaves the
# update alone (see _rule_of).
_RULE_READERS = (
    (
        popt.AdamW,
        lambda o: optim_lib.AdamW(
            beta1=_f(o._beta1),
            beta2=_f(o._beta2),
            epsilon=_f(o._epsilon),
            amsgrad=bool(o._amsgrad),
            weight_decay=_f(o._weight_decay),
        ),
    ),
    (
        popt.Adam,
        lambda o: optim_lib.Adam(
            beta1=_f(o._beta1), beta2=_f(o._beta2), epsilon=_f(o._epsilon), amsgrad=bool(o._amsgrad)
        ),
    ),
    (
        popt.Lamb,
        lambda o: optim_lib.Lamb(
            lamb_weight_decay=_f(o._lamb_weight_decay),
            beta1=_f(o._beta1),
            beta2=_f(o._beta2),
            epsilon=_f(o._epsilon),
            always_adapt=bool(o.always_adapt),
        ),
    ),
    (
        popt.Momentum,
        lambda o: optim_lib.Momentum(
            momentum=_f(o._momentum), use_nesterov=bool(o._use_nesterov), rescale_grad=_f(o._rescale_grad)
        ),
    ),
    (
        popt.Adagrad,
        lambda o: optim_lib.Adagrad(epsilon=_f(o._epsilon), initial_accumulator_value=_f(o.initial_accumulator_value)),
    ),
    (
        popt.RMSProp,
        lambda o: optim_lib.RMSProp(
            rho=_f(o._rho), epsilon=_f(o._epsilon), momentum=_f(o._momentum), centered=bool(o._centered)
        ),
    ),
    (popt.Adamax, lambda o: optim_lib.Adamax(beta1=_f(o._beta1), beta2=_f(o._beta2), epsilon=_f(o._epsilon))),
    (popt.SGD, lambda o: optim_lib.SGD()),
)

# A parameter group's keys that override the rule's hyper-parameters (AdamW's weight_decay is its
# decoupled coefficient; for every other optimizer a group's weight_decay is a regularizer).
_GROUP_RULE_KEYS = {
    "beta1",
    "beta2",
    "epsilon",
    "momentum",
    "use_nesterov",
    "rescale_grad",
    "rho",
    "centered",
    "initial_accumulator_value",
    "lamb_weight_decay",
}


def optimizer_config(opt: popt.Optimizer, names: Mapping[int | str, str] | None = None) -> optim_lib.OptimizerConfig:
    """The Paddle-free config of `opt`, keyed by `names[id(p)]`, `names[p.name]`, or `p.name`."""
    rule = _rule_of(opt)
    groups = _param_groups(opt)
    params = []
    for index, (group, members) in enumerate(groups):
        group_rule = _group_rule(rule, group)
        for p in members:
            settings = _param_settings(opt, p, group, index, group_rule)
            params.append((_name_of(p, names), settings))
    group_dicts = [g for g, _ in groups if g is not None]
    return optim_lib.OptimizerConfig(
        rule=rule,
        params=tuple(params),
        learning_rate=schedule_config(opt._learning_rate),
        regularizer=_global_regularizer(opt),
        grad_clip=_clip(opt._grad_clip),
        group_clips=tuple(_clip(g.get("grad_clip", opt._grad_clip)) for g in group_dicts),
        name=opt._name,
    )


# The methods Paddle's optimizers compute an update with (Optimizer.step -> _apply_optimize -> regularization,
# _create_optimization_pass -> accumulators, _append_optimize_op, _finish_update; Adam/AdamW's own step and
# multi-tensor path). A subclass that overrides one of them has an update of its own (PaddleFormers'
# AdamWMini keeps one moment2 per tensor; AdamWCustom quantizes): read as its Paddle base, it would train
# with the base's numbers, silently. Other overrides (__init__, __str__, new methods) leave the rule alone.
_UPDATE_METHODS = (
    "step",
    "minimize",
    "apply_gradients",
    "_apply_optimize",
    "_declarative_step",
    "_create_optimization_pass",
    "_pir_create_optimization_pass",
    "append_regularization_ops",
    "_create_regularization_of_grad",
    "_update_regularization",
    "_create_global_learning_rate",
    "_global_learning_rate",
    "_create_param_lr",
    "_create_accumulators",
    "_add_moments_pows",
    "_add_accumulator",
    "_get_accumulator",
    "_get_accumulator_master",
    "_create_master_weight",
    "_is_dtype_fp16_or_bf16",
    "_append_optimize_op",
    "_multi_tensor_init",
    "_append_optimize_multi_tensor_op",
    "_finish_update",
    "_add_param_group",
    "_update_param_group",
    "_get_parameter",
)


def _rule_of(opt):
    readers = dict(_RULE_READERS)
    base = next((cls for cls in type(opt).__mro__ if cls in readers), None)
    if base is None:
        raise TrainingError(f"paddle_xla cannot train with {_where(type(opt))} yet; use one of {_supported()}")
    own = _own_update_methods(opt, base)
    if own:
        hint = " (PaddleFormers' Trainer: optim='adamw')" if type(opt).__module__.startswith("paddleformers") else ""
        raise TrainingError(
            f"paddle_xla cannot train with {_where(type(opt))}: it subclasses paddle.optimizer.{base.__name__} but "
            f"overrides {', '.join(own)}, so its update is its own, and paddle_xla computes only the update rules "
            f"of Paddle's own optimizers (read as {base.__name__}, it would train with other numbers). Use one of "
            f"{_supported()}{hint}, or a subclass that leaves those methods alone."
        )
    return readers[base](opt)


def _own_update_methods(opt, base) -> list[str]:
    """The update methods type(opt) (or opt itself) defines otherwise than the Paddle class `base`."""
    cls = type(opt)
    return [m for m in _UPDATE_METHODS if getattr(cls, m, None) is not getattr(base, m, None) or m in vars(opt)]


def _supported() -> str:
    return "paddle.optimizer." + ", ".join(cls.__name__ for cls, _ in _RULE_READERS)


def _where(cls) -> str:
    """module.Class (file:line), the class and where it is defined."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    try:
        file = inspect.getsourcefile(cls)
    except TypeError:
        return name
    try:
        line = f":{inspect.getsourcelines(cls)[1]}"
    except (OSError, TypeError):
        line = ""
    return f"{name} ({file}{line})" if file else name


def _param_groups(opt):
    """[(group dict or None, [params])]: one None group when the optimizer has no groups."""
    if opt._parameter_list and isinstance(opt._parameter_list[0], dict):
        return [(g, list(g["params"])) for g in opt._param_groups]
    return [(None, list(opt._parameter_list or []))]


def _group_rule(rule, group):
    if group is None:
        return None
    keys = {k: group[k] for k in _GROUP_RULE_KEYS if k in group}
    if isinstance(rule, optim_lib.AdamW) and "weight_decay" in group:
        keys["weight_decay"] = group["weight_decay"]
    fields = {f.name for f in dataclasses.fields(rule)}
    changes = {
        k: (_f(v) if isinstance(v, (int, float, paddle.Tensor)) and not isinstance(v, bool) else v)
        for k, v in keys.items()
        if k in fields
    }
    new = dataclasses.replace(rule, **changes)
    return None if new == rule else new


def _param_settings(opt, p, group, index, group_rule):
    return optim_lib.ParamSettings(
        lr_scale=_f((getattr(p, "optimize_attr", None) or {}).get("learning_rate", 1.0)),
        trainable=not p.stop_gradient,
        need_clip=getattr(p, "need_clip", True) is not False,
        regularizer=_param_regularizer(opt, p, group),
        apply_decay=_applies_decay(opt, p, group),
        lr_ratio=_f(opt._lr_ratio(p)) if isinstance(opt, popt.AdamW) and opt._lr_ratio is not None else 1.0,
        group=index,
        rule=group_rule,
        paddle_name=p.name,
    )


def _name_of(p, names):
    if names is None:
        return p.name
    return names.get(id(p), names.get(p.name, p.name))


def _applies_decay(opt, p, group):
    if isinstance(opt, popt.AdamW):
        fn = opt._apply_decay_param_fun
        return fn is None or bool(fn(p.name))
    if isinstance(opt, popt.Lamb):
        fn = (group or {}).get("exclude_from_weight_decay_fn", opt._exclude_from_weight_decay_fn)
        return fn is None or not fn(p)
    return True


def _param_regularizer(opt, p, group):
    """The regularization Paddle applies to p's gradient: its own ParamAttr one, else the optimizer's."""
    own = getattr(p, "regularizer", None)
    if own is not None:
        return _regularizer(own)
    if not isinstance(opt, popt.Momentum):
        return _regularizer(opt.regularization)
    # NOTE: Momentum moves an L2Decay weight_decay (global or a group's) into its kernel.
    method = (group or {}).get("regularization_method", opt._regularization_method)
    coeff = (group or {}).get("regularization_coeff", opt._regularization_coeff)
    fused = optim_lib.L2Decay(_f(coeff)) if method == "l2_decay" else None
    appended = _regularizer(opt.regularization)
    if fused is not None and appended is not None:
        raise TrainingError(
            f"parameter {p.name} would get both a group L2Decay and the global {appended}; "
            "give the group and the optimizer the same kind of weight_decay"
        )
    return fused or appended


def _global_regularizer(opt):
    if isinstance(opt, popt.Momentum) and opt._regularization_method == "l2_decay":
        return optim_lib.L2Decay(_f(opt._regularization_coeff))
    return _regularizer(opt.regularization)


def _regularizer(reg):
    if reg is None:
        return None
    if isinstance(reg, (int, float)):
        return optim_lib.L2Decay(float(reg))
    if isinstance(reg, preg.L2Decay):
        return optim_lib.L2Decay(_f(reg._coeff))
    if isinstance(reg, preg.L1Decay):
        return optim_lib.L1Decay(_f(reg._coeff))
    raise TrainingError(f"unsupported regularizer {reg!r}; use paddle.regularizer.L1Decay or L2Decay")


def _clip(clip):
    if clip is None:
        return None
    if isinstance(clip, pnn.ClipGradByGlobalNorm):
        return clip_lib.ClipGradByGlobalNorm(clip_norm=float(clip.clip_norm), auto_skip_clip=bool(clip.auto_skip_clip))
    if isinstance(clip, pnn.ClipGradByNorm):
        return clip_lib.ClipGradByNorm(clip_norm=float(clip.clip_norm))
    if isinstance(clip, pnn.ClipGradByValue):
        return clip_lib.ClipGradByValue(max=float(clip.max), min=float(clip.min))
    raise TrainingError(
        f"unsupported gradient clip {type(clip).__name__}; use paddle.nn.ClipGradByGlobalNorm, "
        "ClipGradByNorm or ClipGradByValue"
    )


def _f(x) -> float:
    if isinstance(x, paddle.Tensor):
        return float(x.item())
    return float(x)


# -- learning-rate schedules --------------------------------------------------------------------


def schedule_config(lr: float | plr.LRScheduler) -> lr_lib.Schedule:
    """The train.lr schedule of a Paddle LRScheduler; a float learning rate becomes `lr.Constant`.

    Its current step is the scheduler's `last_epoch` (see `schedule_state`). A later
    `opt.set_lr(...)` on the Paddle side is not seen: read the config again."""
    if isinstance(lr, (int, float, paddle.Tensor)):
        return lr_lib.Constant(_f(lr))
    reader = _SCHEDULE_READERS.get(type(lr))
    if reader is None:
        raise TrainingError(
            f"unsupported LRScheduler {type(lr).__name__}; supported: {sorted(c.__name__ for c in _SCHEDULE_READERS)}"
        )
    return reader(lr)


def schedule_state(lr: plr.LRScheduler) -> int | lr_lib.PlateauState:
    """The scheduler's position: `last_epoch`, or ReduceOnPlateau's whole state."""
    if isinstance(lr, plr.ReduceOnPlateau):
        return lr_lib.PlateauState(
            cooldown_counter=lr.cooldown_counter,
            best=_maybe_f(lr.best),
            num_bad_epochs=lr.num_bad_epochs,
            last_epoch=lr.last_epoch,
            last_lr=float(lr.last_lr),
        )
    step = int(lr.last_epoch)
    ours = schedule_config(lr).lr_at(step)
    if ours != float(lr.last_lr):
        warnings.warn(
            f"{type(lr).__name__} at last_epoch={step} has lr {lr.last_lr}, but replaying its "
            f"steps gives {ours}: was it stepped with an explicit epoch?",
            stacklevel=2,
        )
    return step


def _inner_schedule(lr):
    """LinearWarmup's target: a scheduler, or a float that stays a float (it has no state_dict)."""
    return schedule_config(lr) if isinstance(lr, plr.LRScheduler) else _f(lr)


def _maybe_f(x):
    return None if x is None else _f(x)


def _one_cycle(s):
    max_lr, initial = s._lr_config[1], s._lr_config[0]
    divide = _recover(max_lr / initial, lambda d: max_lr / float(d) == initial)
    pct = _recover((s._step_config[1] + 1) / s.total_steps, lambda q: q * s.total_steps - 1 == s._step_config[1])
    return lr_lib.OneCycleLR(
        max_learning_rate=max_lr,
        total_steps=s.total_steps,
        divide_factor=divide,
        end_learning_rate=s._lr_config[-1],
        phase_pct=pct,
        anneal_strategy="cos" if s.anneal_func.__name__ == "_cos_annealing" else "linear",
        three_phase=len(s._lr_config) == 4,
    )


def _recover(guess, exact):
    """A constructor argument Paddle did not keep, recovered from a derived value it did keep."""
    for candidate in (round(guess, 9), round(guess, 6), round(guess, 3), guess):
        if exact(candidate):
            return candidate
    return guess


def _cyclic(s):
    if getattr(s.scale_fn, "__self__", None) is not s:
        raise TrainingError("CyclicLR with a custom scale_fn is not supported; use one of its modes")
    up = round(s.cycle_size * s.step_up_pct)
    down = round(s.cycle_size - up)
    return lr_lib.CyclicLR(
        base_learning_rate=s.base_lr,
        max_learning_rate=s.max_lr,
        step_size_up=up,
        step_size_down=None if down == up else down,
        mode=s.mode,
        exp_gamma=s.gamma,
    )


_SCHEDULE_READERS = {
    plr.NoamDecay: lambda s: lr_lib.NoamDecay(d_model=s.d_model, warmup_steps=s.warmup_steps, learning_rate=s.base_lr),
    plr.PiecewiseDecay: lambda s: lr_lib.PiecewiseDecay(boundaries=s.boundaries, values=s.values),
    plr.NaturalExpDecay: lambda s: lr_lib.NaturalExpDecay(learning_rate=s.base_lr, gamma=s.gamma),
    plr.InverseTimeDecay: lambda s: lr_lib.InverseTimeDecay(learning_rate=s.base_lr, gamma=s.gamma),
    plr.PolynomialDecay: lambda s: lr_lib.PolynomialDecay(
        learning_rate=s.base_lr, decay_steps=s.decay_steps, end_lr=s.end_lr, power=s.power, cycle=bool(s.cycle)
    ),
    plr.LinearWarmup: lambda s: lr_lib.LinearWarmup(
        learning_rate=_inner_schedule(s.learning_rate),
        warmup_steps=s.warmup_steps,
        start_lr=s.start_lr,
        end_lr=s.end_lr,
    ),
    plr.ExponentialDecay: lambda s: lr_lib.ExponentialDecay(learning_rate=s.base_lr, gamma=s.gamma),
    plr.MultiStepDecay: lambda s: lr_lib.MultiStepDecay(
        learning_rate=s.base_lr, milestones=s.milestones, gamma=s.gamma
    ),
    plr.StepDecay: lambda s: lr_lib.StepDecay(learning_rate=s.base_lr, step_size=s.step_size, gamma=s.gamma),
    plr.LambdaDecay: lambda s: lr_lib.LambdaDecay(learning_rate=s.base_lr, lr_lambda=s.lr_lambda),
    plr.MultiplicativeDecay: lambda s: lr_lib.MultiplicativeDecay(learning_rate=s.base_lr, lr_lambda=s.lr_lambda),
    plr.ReduceOnPlateau: lambda s: lr_lib.ReduceOnPlateau(
        learning_rate=s.base_lr,
        mode=s.mode,
        factor=s.factor,
        patience=s.patience,
        threshold=s.threshold,
        threshold_mode=s.threshold_mode,
        cooldown=s.cooldown,
        min_lr=s.min_lr,
        epsilon=s.epsilon,
    ),
    plr.CosineAnnealingDecay: lambda s: lr_lib.CosineAnnealingDecay(
        learning_rate=s.base_lr, T_max=s.T_max, eta_min=s.eta_min
    ),
    plr.OneCycleLR: _one_cycle,
    plr.CyclicLR: _cyclic,
    plr.LinearLR: lambda s: lr_lib.LinearLR(
        learning_rate=s.base_lr, total_steps=s.total_steps, start_factor=s.start_factor, end_factor=s.end_factor
    ),
    plr.CosineAnnealingWarmRestarts: lambda s: lr_lib.CosineAnnealingWarmRestarts(
        learning_rate=s.base_lr, T_0=s.T_0, T_mult=s.T_mult, eta_min=s.eta_min
    ),
}


# -- state both ways ----------------------------------------------------------------------------


def accumulator_key(config: optim_lib.OptimizerConfig, name: str, acc: str, suffix: str = "_0") -> str:
    """Paddle's name of one accumulator: param.name + "_" + [opt name + "_"] + acc + unique suffix."""
    prefix = f"{config.name}_" if config.name else ""
    return f"{config.settings(name).paddle_name or name}_{prefix}{acc}{suffix}"


def to_paddle_state_dict(
    config: optim_lib.OptimizerConfig,
    state: Mapping[str, Mapping[str, Any]],
    params: Mapping[str, Any] | None = None,
    schedule_state: Any = None,
    *,
    suffix: str = "_0",
) -> dict[str, Any]:
    """`state` in the layout of `paddle_opt.state_dict()`, for `paddle_opt.set_state_dict(d)`.

    Paddle suffixes accumulator names with a per-process counter ("_0" in a fresh process or a
    `paddle.utils.unique_name.guard()`); pass `suffix` if the target optimizer's differ."""
    out = {}
    for name in config.trainable():
        for acc in config.rule_of(name).accumulators:
            value = np.asarray(state[name][acc])
            if params is not None and acc not in _SCALAR_ACCS and value.shape != tuple(np.shape(params[name])):
                raise CheckpointError(f"{name}.{acc} has shape {value.shape}, the parameter {np.shape(params[name])}")
            out[accumulator_key(config, name, acc, suffix)] = paddle.to_tensor(value)
    schedule = config.learning_rate
    if isinstance(schedule, lr_lib.Schedule) and not isinstance(schedule, lr_lib.Constant):
        if schedule_state is None:
            raise CheckpointError("the optimizer has an LR scheduler: pass schedule_state (its last_epoch)")
        out["LR_Scheduler"] = schedule.paddle_state(schedule_state)
    return out


_SCALAR_ACCS = {"beta1_pow_acc", "beta2_pow_acc"}


def from_paddle_state_dict(
    config: optim_lib.OptimizerConfig, state_dict: Mapping[str, Any], params: Mapping[str, Any] | None = None
) -> tuple[dict, Any]:
    """(state, schedule_state) from `paddle_opt.state_dict()`. A parameter with no accumulators yet
    (Paddle creates them at the first step) gets fresh ones from `params`.

    Accumulators of a multi_precision optimizer (named after the parameter's float32 master weight,
    `<param>_fp32_master_0_moment1_0`) are read as the parameter's own: paddle_xla's parameters are
    float32 masters already. State for parameters this optimizer does not train (frozen, or not
    given to it) is left alone; see `_refuse_foreign` for when such state is an error."""
    keys = _accumulator_keys(config, state_dict)
    _refuse_foreign(config, state_dict, keys)
    fresh = None
    state = {}
    for name in config.trainable():
        rule = config.rule_of(name)
        found = keys[name]
        if rule.accumulators and all(k is None for k in found.values()):
            if params is None:
                raise CheckpointError(
                    f"the Paddle state has no accumulators for {name}; pass params to start fresh ones"
                )
            fresh = fresh or optim_lib.init_state(config, params)
            state[name] = fresh[name]
            continue
        missing = [acc for acc, k in found.items() if k is None]
        if missing:
            raise CheckpointError(f"the Paddle state lacks {missing} for {name}")
        state[name] = {acc: jnp.asarray(_numpy(state_dict[k])) for acc, k in found.items()}
        if params is not None and name in params:
            for acc, k in found.items():
                shape, want = tuple(state[name][acc].shape), tuple(np.shape(params[name]))
                if acc not in _SCALAR_ACCS and shape != want:
                    raise CheckpointError(
                        f"the Paddle state's {k} has shape {list(shape)}, but the parameter {name} has {list(want)}: "
                        "the state was saved from another model that names its parameters alike (or from this one "
                        "built in another order); load the optimizer state saved with this model, built the same way"
                    )
    return state, _schedule_state_of(config, state_dict.get("LR_Scheduler"))


# NOTE: Paddle names a multi_precision optimizer's accumulators after the master weight it creates,
# param.name + "_fp32_master" + "_<n>" (Optimizer._gen_master_weight_var_name), and keeps the master
# weights themselves under "master_weights", keyed by param.name.
_MASTER_INFIX = re.compile(r"_fp32_master_\d+_")
_COUNTER = re.compile(r"^(.*)_\d+$")
_NOT_ACCUMULATORS = ("LR_Scheduler", "master_weights")


def _accumulator_keys(config, state_dict) -> dict[str, dict[str, str | None]]:
    """{param: {accumulator: its key in state_dict, or None}} for every parameter of the config (trainable
    or not): the key is accumulator_key(...) with any "_<n>" counter, or its multi_precision form."""
    by_stem: dict[str, list[str]] = {}
    for key in state_dict:
        m = _COUNTER.match(key) if key not in _NOT_ACCUMULATORS else None
        if m is None:
            continue
        stems = {m.group(1), _MASTER_INFIX.sub("_", m.group(1), count=1)}
        for stem in stems:
            by_stem.setdefault(stem, []).append(key)
    out = {}
    for name, _ in config.params:
        found = {}
        for acc in config.rule_of(name).accumulators:
            stem = accumulator_key(config, name, acc, suffix="")
            keys = by_stem.get(stem, [])
            if len(keys) > 1:
                raise CheckpointError(f"several Paddle accumulators match {stem}_<n>: {keys}")
            found[acc] = keys[0] if keys else None
        out[name] = found
    return out


def _refuse_foreign(config, state_dict, keys) -> None:
    """A state saved from a model whose parameters were named otherwise (e.g. built in another order), or by an
    optimizer of another `name`, is an error when a trainable parameter finds no state in it while the file
    holds state it cannot place: taken silently, those parameters would start from fresh moments. Paddle's own
    step stops on them too. State for names this optimizer does not train (frozen parameters, parameters not
    given to it) is fine on its own: nothing of this model's is lost."""
    consumed = {k for found in keys.values() for k in found.values() if k is not None}
    fresh = [
        name
        for name in config.trainable()
        if config.rule_of(name).accumulators and all(k is None for k in keys[name].values())
    ]
    if not fresh:
        return
    ours = {config.settings(name).paddle_name or name for name, _ in config.params}
    unplaced = [k for k in state_dict if k not in _NOT_ACCUMULATORS and k not in consumed]
    unplaced += [f"master_weights[{n!r}]" for n in (state_dict.get("master_weights") or {}) if n not in ours]
    if unplaced:
        named = [config.settings(n).paddle_name or n for n in fresh]
        raise CheckpointError(
            f"The optimizer state holds {len(unplaced)} entries of parameters this model does not have (e.g. "
            f"{unplaced[:3]}), and none for {len(fresh)} of this model's {len(config.trainable())} trainable "
            f"parameters (e.g. {named[:3]}), which would start from fresh moments. It was saved from a model whose "
            "parameters were named otherwise, or by an optimizer of another name: build the model the same way, in "
            "a fresh process (or inside paddle.utils.unique_name.guard()), and give the optimizer the same name, "
            "before loading it."
        )


def _schedule_state_of(config, lr_state):
    if lr_state is None:
        return None
    if isinstance(config.learning_rate, lr_lib.ReduceOnPlateau):
        return lr_lib.PlateauState(
            **{k: lr_state[k] for k in ("cooldown_counter", "best", "num_bad_epochs", "last_epoch", "last_lr")}
        )
    return int(lr_state["last_epoch"])


def _numpy(v):
    return v.numpy() if isinstance(v, paddle.Tensor) else np.asarray(v)


__all__ = [
    "optimizer_config",
    "schedule_config",
    "schedule_state",
    "to_paddle_state_dict",
    "from_paddle_state_dict",
    "accumulator_key",
]
