"""Write a train step as a Paddle-free training artifact, with its whole state (train_reader.py
continues it anywhere).

`px.export(train_step, "bert-train.pxa")` writes the members every artifact has (container.py:
graph.json, weights.safetensors with params and buffers, strategy.json = Strategy.to_dict()) and:
  optimizer.json           {"config": optim.config_to_dict(config), "schedule": schedule.to_dict()}
  train_state.safetensors  the optimizer state and the RNG key, named as train/checkpoint.py names
                           them ("opt['w']['moment1']", "rng")
  exported/<platform>.bin  jax.export's StableHLO of
                           step(params, buffers, opt_state, feeds, key_data, lr)
                             -> (params, buffers, opt_state, loss, fetches, finite)
The manifest has kind "train" and a "train" entry: the step count, the LR schedule's offset, the
trainable names, the model fingerprint and the param name -> state_dict key map (as TrainStep's
checkpoints use them), the precision the executables compute in, and whether the optimizer state is
stored or starts fresh (synthetic weights). Nothing here imports paddle."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import x64
from ..errors import ExportError
from ..graph import Graph
from ..lowering.lower import lower
from ..lowering.policy import LoweringPolicy
from ..strategy import Strategy
from ..train import checkpoint, optim
from ..train import lr as lr_lib
from ..train.step import TrainState, make_step
from . import container as fmt
from . import synthetic_weights
from .jax_export import avals, check_platforms, export_all

OPTIMIZER, TRAIN_STATE = "optimizer.json", "train_state.safetensors"
EXPORTABLE_PRECISIONS = ("fp32", "bf16")


# ---- the step function an artifact serializes ---------------------------------------------------
def step_fn(graph: Graph, config: optim.OptimizerConfig, policy: LoweringPolicy = LoweringPolicy()):
    """f(params, buffers, opt_state, feeds, key_data, lr) -> (params, buffers, opt_state, loss, fetches, finite)."""
    update = functools.partial(optim.apply, config)
    # NOTE: bf16 is Paddle AMP O1 (half.py): half compute, float32 master weights.
    # NOTE: the program's asserts as flags after the fetches (manifest "checks"): a false one keeps the step.
    step = make_step(graph, update, forward=lower(graph, policy, checks=True))

    def f(params, buffers, opt_state, feeds, key_data, lr):
        # NOTE: raw key data, not a key: a typed key array does not cross the serialization boundary.
        return step(params, buffers, opt_state, feeds, jax.random.wrap_key_data(key_data), lr)

    return f


def exportable(strategy: Strategy) -> str | None:
    """Why a step under `strategy` has no single-device executable to serialize (None: it has)."""
    if strategy.devices != 1 or strategy.micro_batches != 1 or strategy.steps_per_call != 1:
        return (
            f"its Strategy spreads the step out (replicas={strategy.replicas}, stages={strategy.stages}, "
            f"micro_batches={strategy.micro_batches}, steps_per_call={strategy.steps_per_call})"
        )
    if strategy.precision not in EXPORTABLE_PRECISIONS:
        return f"precision={strategy.precision!r} needs loss scaling, which runs on the SPMD engine"
    if strategy.recompute is not None:
        return f"recompute={strategy.recompute!r} runs on the SPMD engine"
    return None


# ---- writing ----------------------------------------------------------------------------------
@x64.enabled
def export_train(
    step, path: str, platforms: Sequence[str] = ("cpu",), example_inputs=None, synthetic: Mapping | None = None
) -> dict:
    """Write a train step (px.train_step's TrainStep, or a TrainArtifact) to `path`; see the module doc."""
    platforms = check_platforms(platforms)
    graph, config, schedule, state = step.graph, step.config, step.schedule, step.state
    if graph is None:
        raise ExportError("This train step holds no Graph, so it cannot be exported again.")
    _check_schedule_travels(schedule)
    strategy = strategy_of(step)
    weights = {k: np.asarray(v) for k, v in {**state.params, **state.buffers}.items()}
    trainable = sorted(state.params)
    opt_avals = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), state.opt_state)
    opt_avals = {k: dict(v) for k, v in dict(opt_avals).items()}
    key_data = np.asarray(jax.random.key_data(state.key))
    why_not = exportable(strategy)
    policies = {p: LoweringPolicy.tuned(p, strategy.precision) for p in platforms}
    exported: dict[str, bytes] = {}
    shapes: dict = {}
    if why_not is None:
        head = (
            avals({k: weights[k] for k in trainable}),
            avals({k: v for k, v in weights.items() if k not in state.params}),
            opt_avals,
        )
        tail = (jax.ShapeDtypeStruct(key_data.shape, key_data.dtype), jax.ShapeDtypeStruct((), jnp.float32))
        exported, shapes = export_all(
            lambda p: jax.jit(step_fn(graph, config, policies[p])), graph, head, tail, platforms, example_inputs
        )
    weights, synth = synthetic_weights.leave_out(weights, synthetic)
    # NOTE: with synthetic weights the optimizer state (2x the weights for Adam) is left out too;
    # the loader starts it fresh, as a newly built optimizer would.
    arrays = checkpoint.to_arrays(TrainState({}, {}, {} if synth else state.opt_state, state.step, state.key))
    extra = {
        OPTIMIZER: json.dumps(
            {"config": optim.config_to_dict(config), "schedule": schedule.to_dict()}, indent=1
        ).encode(),
        TRAIN_STATE: fmt.weights_bytes(arrays),
    }
    train = {
        "step": int(state.step),
        "lr_offset": int(lr_offset_of(step)),
        "trainable": trainable,
        "fingerprint": step.fingerprint(),
        "names": stable_names_of(step),
        "precision": strategy.precision,
        "opt_state": "fresh" if synth else "stored",
        **({"not_exported": why_not} if why_not else {}),
    }
    return fmt.write(
        path,
        "train",
        graph,
        weights,
        _strategy_json(strategy),
        exported,
        {p: shapes for p in exported},
        policies,
        strategy.precision,
        synth,
        extra,
        train=train,
    )


def strategy_of(step) -> Strategy:
    # NOTE: a TrainArtifact has `.strategy`; a TrainStep keeps it in its StepRunner (`_step.strategy`).
    found = getattr(step, "strategy", None) or getattr(getattr(step, "_step", None), "strategy", None)
    return found if isinstance(found, Strategy) else Strategy()


def stable_names_of(step) -> dict[str, str]:
    """Param name (linear_3.w_0) -> the Layer's state_dict key (l1.weight): checkpoints use the latter."""
    names = getattr(step, "stable_names", None)
    return dict(names()) if callable(names) else {}


def lr_offset_of(step) -> int:
    return getattr(step, "lr_offset", None) or getattr(step, "_lr_offset", 0) or 0


def _strategy_json(strategy: Strategy) -> bytes:
    try:
        return json.dumps(strategy.to_dict()).encode()
    except TypeError as e:
        raise ExportError(
            f"The Strategy does not serialize to JSON ({e}); keep its fields (and `extra`) to "
            "plain numbers, strings, lists and dicts."
        ) from None


def _check_schedule_travels(schedule: lr_lib.Schedule) -> None:
    """A schedule that runs Python on the host (LambdaDecay, MultiplicativeDecay) or reads metrics
    (ReduceOnPlateau) cannot be rebuilt where the artifact is loaded."""
    inner: Any = schedule
    while isinstance(getattr(inner, "learning_rate", None), lr_lib.Schedule):
        inner = inner.learning_rate
    if getattr(schedule, "host_only", False) or getattr(inner, "host_only", False):
        name = type(inner).__name__
        what = (
            "decides the learning rate from the metrics it is given"
            if name == "ReduceOnPlateau"
            else "calls a Python function (lr_lambda) on the host at every step"
        )
        raise ExportError(
            f"The LR scheduler paddle.optimizer.lr.{name} {what}, which cannot travel in an artifact. "
            "Use a built-in closed-form scheduler (PiecewiseDecay, LinearWarmup, CosineAnnealingDecay, "
            "PolynomialDecay, ...) for a step you export, or export the inference model instead."
        )
