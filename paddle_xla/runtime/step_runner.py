"""The training step under a Strategy: the plain jitted step (train/step.py) on one device for the
default Strategy, the SPMD engine (parallel/engine.py) for any other. It stands above both, so
neither imports the other. Paddle-free."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from .. import x64
from ..graph import Graph
from ..lowering.interpreter import check_message
from ..lowering.lower import checked_ops, lower
from ..lowering.policy import LoweringPolicy
from ..parallel import shares
from ..train import optim
from ..train.step import STEP_COMPILER_OPTIONS, TrainState, make_grads, make_step, not_finite_message
from .compile_cache import compile_progress, ensure_compile_cache
from .executables import shapes_text, signature


# ---- the step under a Strategy ------------------------------------------------------------------
@dataclass
class StepResult:
    state: TrainState
    losses: list[float]
    outputs: list
    error: str | None = None  # set when a step was not finite and no loss scaling skipped it
    failed: bool = False  # the error is a Paddle assert of the program, false for this batch


def _live_forward(graph: Graph) -> Callable:
    """The forward a step compiled for this process's backend runs (e.g. channels-last CNNs on CPU),
    with the program's asserts as flags after its fetches (a false one keeps the step from applying)."""
    return lower(graph, LoweringPolicy.live(), checks=True)


@x64.methods
class StepRunner:
    """What TrainStep calls: `steps_per_call` optimizer steps per host call, laid out by a Strategy.

    The default Strategy runs the plain jitted step above on one device; any other goes to the
    SPMD engines over the ("replica", "stage", "tensor") mesh: parallel/sharded.py for one stage
    (replicas x tensor, sharding), parallel/engine.py for pipelines."""

    def __init__(self, graph: Graph, config, strategy=None, placement=None, tensor_plan=None, name: str | None = None):
        from ..strategy import Strategy

        self.graph = graph
        self.name = name or graph.meta.get("source", "model")  # what the compile progress line calls it
        self.strategy = shares.strategy_for_group(strategy if strategy is not None else Strategy())
        self.engine = None
        self._grads_jit: Callable | None = None
        self._seen: set[tuple] = set()  # signatures compiled so far (jax.jit caches the executables)
        if self.strategy.is_default:
            update = functools.partial(optim.apply, config)
            self._jit = jax.jit(
                make_step(graph, update, forward=_live_forward(graph)),
                donate_argnums=(0, 2),
                compiler_options=STEP_COMPILER_OPTIONS,
            )
        elif self.strategy.stages == 1:
            from ..parallel.sharded import ShardedEngine

            self.engine = ShardedEngine(graph, config, self.strategy, placement, tensor_plan)
        else:
            from ..parallel.engine import Engine

            self.engine = Engine(graph, config, self.strategy, placement, tensor_plan)

    @property
    def steps_per_call(self) -> int:
        return self.strategy.steps_per_call

    @property
    def loss_scale(self) -> float | None:
        return self.engine.loss_scale if self.engine is not None else None

    @property
    def skipped_steps(self) -> int:
        return self.engine.skipped_steps if self.engine is not None else 0

    def scaler_state(self) -> dict | None:
        """The fp16 loss scaler's state for a checkpoint, or None when there is no scaler."""
        return self.engine.scaler_state() if self.engine is not None and self.engine.scaler_cfg else None

    def set_scaler_state(self, state) -> None:
        if state is not None and self.engine is not None and self.engine.scaler_cfg:
            self.engine.set_scaler_state(state)

    def report(self) -> dict:
        """The layout in numbers: mesh shape, pipeline plan, bubble fraction, bytes per device."""
        if self.engine is None:
            return {"replicas": 1, "stages": 1, "bubble_fraction": 0.0}
        e = self.engine
        return {
            "replicas": self.strategy.replicas,
            "stages": self.strategy.stages,
            "micro_batches": self.strategy.micro_batches,
            "schedule": self.strategy.schedule,
            "bubble_fraction": e.bubble_fraction(),
            "bytes_per_device": e.param_bytes_per_device(),
            "plan": getattr(e.placement, "plan", ""),
        }

    def split(self, args, kwargs) -> list[tuple[list, dict]]:
        """One (args, kwargs) per optimizer step: inputs come stacked [steps_per_call, batch, ...] or as
        lists of steps_per_call batches."""
        k = self.steps_per_call
        if k == 1:
            return [(list(args), dict(kwargs))]
        for name, x in [*enumerate(args), *kwargs.items()]:
            n = len(x) if isinstance(x, (list, tuple)) else (x.shape[0] if getattr(x, "ndim", 0) else None)
            if n != k:
                from ..errors import FeedError

                raise FeedError(
                    f"With steps_per_call={k}, each input holds {k} batches: stack them as "
                    f"[{k}, batch, ...] or pass a list of {k}; input {name!r} has {n}."
                )
        return [([a[i] for a in args], {n: v[i] for n, v in kwargs.items()}) for i in range(k)]

    def __call__(self, state: TrainState, feeds: list[dict], lrs: list[float], accumulated=None) -> StepResult:
        if self.engine is None:
            return self._plain(state, feeds[0], lrs[0], accumulated)
        k = len(feeds)
        keys = jax.vmap(lambda i: jax.random.fold_in(state.key, i))(state.step + jnp.arange(k))
        stacked = {n: np.stack([np.asarray(f[n]) for f in feeds]) for n in feeds[0]}
        joined = shares.joined()
        if joined:
            share = next(iter(stacked.values())).shape[1]
            stacked = shares.global_batches(stacked)
        with self._compiling("train step", stacked):
            res = self.engine(state.params, state.buffers, state.opt_state, stacked, keys, lrs)
        done = k if self.engine.scaler_cfg is not None or res.finite.all() else int(np.argmin(res.finite))
        new = TrainState(res.params, res.buffers, res.opt_state, state.step + done, state.key)
        losses = [float(x) for x in res.losses]
        error = None if done == k else not_finite_message(state.step + done, losses[done])
        fetches = list(res.fetches)
        if joined:
            fetches = [shares.own_rows(f, share) for f in fetches]
        return StepResult(new, losses, fetches, error)

    def backward(self, s: TrainState, feeds, accumulated, micro: int):
        """One forward and backward pass without an update -> (loss, fetches, buffers, summed grads)."""
        if self.engine is not None:
            from ..errors import TrainingError

            raise TrainingError(
                "Accumulating gradients over calls (update=False) works with the default "
                "Strategy only; with a layout, use Strategy(micro_batches=...) instead."
            )
        if self._grads_jit is None:
            self._grads_jit = jax.jit(make_grads(self.graph, forward=_live_forward(self.graph)))
        # NOTE: each accumulated pass draws its own random numbers (dropout), as Paddle's would.
        key = jax.random.fold_in(jax.random.fold_in(s.key, s.step), micro + 1)
        with self._compiling("forward and backward", feeds, accumulated is not None):
            return self._grads_jit(s.params, s.buffers, feeds, key, *([accumulated] if accumulated is not None else []))

    def _plain(self, s: TrainState, feeds, lr, accumulated=None) -> StepResult:
        key = jax.random.fold_in(s.key, s.step)
        with self._compiling("train step", feeds, accumulated is not None):
            params, buffers, opt_state, loss, fetches, finite = self._jit(
                s.params,
                s.buffers,
                s.opt_state,
                feeds,
                key,
                jnp.asarray(lr, jnp.float32),
                *([accumulated] if accumulated is not None else []),
            )
            loss = float(loss)
        n = len(self.graph.fetches)
        if not bool(finite):
            failed = [check_message(op) for op, ok in zip(checked_ops(self.graph), fetches[n:]) if not bool(ok)]
            return StepResult(
                TrainState(params, s.buffers, opt_state, s.step, s.key),
                [loss],
                [],
                failed[0] if failed else not_finite_message(s.step, loss),
                failed=bool(failed),
            )
        return StepResult(TrainState(params, buffers, opt_state, s.step + 1, s.key), [loss], list(fetches[1:n]))

    def _compiling(self, what: str, feeds, *variant):
        """The progress line of px.compile around the first call of each signature, which compiles
        (a long one shows; its time includes that first step)."""
        sig = (what, signature(feeds), *variant)
        if sig in self._seen:
            return contextlib.nullcontext()
        self._seen.add(sig)
        ensure_compile_cache()
        layout = "" if self.strategy.is_default else f" ({self.strategy.devices} devices)"
        return compile_progress(f"{self.name} {what}{layout} for {shapes_text(sig[1])}")
