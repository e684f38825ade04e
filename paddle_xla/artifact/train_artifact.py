"""Paddle-free training artifacts: a train step exported with its whole state, continued anywhere.

`px.export(train_step, "bert-train.pxa")` writes the members of an inference artifact (reader.py:
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
stored or starts fresh (synthetic weights).

`paddle_xla.artifact.load(path)` opens one as a TrainArtifact: `s(*inputs, *labels) -> loss`
continues from the exporter's last step with the losses the exporter's TrainStep would have given;
its checkpoints are TrainStep's. Nothing here imports paddle."""
from __future__ import annotations

import functools
import json
import os
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import container as fmt
from ..runtime import feeds as feeds_mod
from . import synthetic_weights
from .. import x64
from ..runtime.compile_cache import compile_progress
from ..errors import CheckFailedError, ExportError, FeedError, ModelLoadError, PaddleXlaError, TrainingError
from .jax_export import avals, check_platforms, export_all
from ..graph import Graph
from ..files import atomic_write
from ..ops.util import dtype as jax_dtype
from ..strategy import Strategy
from ..train import checkpoint, optim
from ..train import lr as lr_lib
from ..lowering.interpreter import check_message, fail_on_false_flags
from ..lowering.lower import checked_ops, lower
from ..lowering.policy import LoweringPolicy
from ..train.step import TrainState, make_step

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
        return (f"its Strategy spreads the step out (replicas={strategy.replicas}, stages={strategy.stages}, "
                f"micro_batches={strategy.micro_batches}, steps_per_call={strategy.steps_per_call})")
    if strategy.precision not in EXPORTABLE_PRECISIONS:
        return f"precision={strategy.precision!r} needs loss scaling, which runs on the SPMD engine"
    if strategy.recompute is not None:
        return f"recompute={strategy.recompute!r} runs on the SPMD engine"
    return None


# ---- writing ----------------------------------------------------------------------------------
@x64.enabled
def export_train(step, path: str, platforms: Sequence[str] = ("cpu",), example_inputs=None,
                 synthetic: Mapping | None = None) -> dict:
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
    exported, shapes = {}, {}
    if why_not is None:
        head = (avals({k: weights[k] for k in trainable}), avals({k: v for k, v in weights.items()
                                                                    if k not in state.params}), opt_avals)
        tail = (jax.ShapeDtypeStruct(key_data.shape, key_data.dtype), jax.ShapeDtypeStruct((), jnp.float32))
        exported, shapes = export_all(lambda p: jax.jit(step_fn(graph, config, policies[p])), graph, head, tail,
                                      platforms, example_inputs)
    weights, synth = synthetic_weights.leave_out(weights, synthetic)
    # NOTE: with synthetic weights the optimizer state (2x the weights for Adam) is left out too;
    # the loader starts it fresh, as a newly built optimizer would.
    arrays = checkpoint.to_arrays(TrainState({}, {}, {} if synth else state.opt_state, state.step, state.key))
    members = {fmt.GRAPH: graph.to_json().encode(), fmt.WEIGHTS: fmt.weights_bytes(weights),
               fmt.STRATEGY: _strategy_json(strategy),
               OPTIMIZER: json.dumps({"config": optim.config_to_dict(config), "schedule": schedule.to_dict()},
                                     indent=1).encode(),
               TRAIN_STATE: fmt.weights_bytes(arrays)}
    members.update({fmt.exported_member(p): data for p, data in exported.items()})
    manifest = {"kind": "train",
                "feeds": [fmt.tensor_spec(t) for t in graph.feeds],
                "fetches": [fmt.tensor_spec(t) for t in graph.fetches],
                "exported": {p: {"member": fmt.exported_member(p), **shapes} for p in exported},
                "lowering": fmt.lowering_record(policies, strategy.precision),
                "checks": [check_message(op) for op in checked_ops(graph)],
                "train": {"step": int(state.step), "lr_offset": int(lr_offset_of(step)), "trainable": trainable,
                          "fingerprint": step.fingerprint(), "names": stable_names_of(step),
                          "precision": strategy.precision, "opt_state": "fresh" if synth else "stored",
                          **({"not_exported": why_not} if why_not else {})},
                **({"synthetic_weights": synth} if synth else {})}
    data, manifest = fmt.pack(members, manifest)
    atomic_write(path, data)
    return manifest


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
        raise ExportError(f"The Strategy does not serialize to JSON ({e}); keep its fields (and `extra`) to "
                          "plain numbers, strings, lists and dicts.") from None


def _check_schedule_travels(schedule: lr_lib.Schedule) -> None:
    """A schedule that runs Python on the host (LambdaDecay, MultiplicativeDecay) or reads metrics
    (ReduceOnPlateau) cannot be rebuilt where the artifact is loaded."""
    inner = schedule
    while isinstance(getattr(inner, "learning_rate", None), lr_lib.Schedule):
        inner = inner.learning_rate
    if getattr(schedule, "host_only", False) or getattr(inner, "host_only", False):
        name = type(inner).__name__
        what = ("decides the learning rate from the metrics it is given" if name == "ReduceOnPlateau"
                else "calls a Python function (lr_lambda) on the host at every step")
        raise ExportError(
            f"The LR scheduler paddle.optimizer.lr.{name} {what}, which cannot travel in an artifact. "
            "Use a built-in closed-form scheduler (PiecewiseDecay, LinearWarmup, CosineAnnealingDecay, "
            "PolynomialDecay, ...) for a step you export, or export the inference model instead.")


# ---- reading ----------------------------------------------------------------------------------
@x64.methods
class TrainArtifact:
    """An exported train step: `s(*inputs, *labels) -> loss`, continuing where the exporter stopped.

    Runs the executable exported for this platform (`mode == "exported"`) when the Strategy and
    precision match it, else re-lowers the Graph with the Strategy (`mode == "relowered"`).
    `strategy=` overrides the Strategy it was exported with (e.g. precision="bf16" on a GPU)."""

    def __init__(self, path: str, manifest: dict, members: Mapping[str, bytes], prefer_graph: bool = False,
                 strategy: Strategy | Mapping | None = None):
        self.path, self.manifest = path, manifest
        self.info = _train_info(path, manifest)
        self.graph = fmt.graph_of(path, members)
        self.feeds_spec = fmt.tensors_of(manifest["feeds"])
        self.config, self.schedule = _optimizer(path, members)
        self.strategy = _strategy(path, members, strategy)
        self.lr_offset = int(self.info["lr_offset"])
        self.state = self._initial_state(members)
        self.platform = fmt.current_platform()
        self._runner, self._runs = None, {}
        self.last_outputs: list = []
        self.exported, self.mode, self.why = self._pick(members, prefer_graph)
        self._exported_why = self.why

    @property
    def input_names(self) -> list[str]:
        return [f.name for f in self.feeds_spec]

    @property
    def exported_platforms(self) -> list[str]:
        return sorted(self.manifest.get("exported", {}))

    @property
    def step(self) -> int:
        return self.state.step

    def lr(self) -> float:
        return float(self.schedule.lr_at(self.lr_offset + self.state.step))

    # -- state --
    def _initial_state(self, members) -> TrainState:
        weights = synthetic_weights.fill(self.manifest, fmt.weights_of(self.path, members[fmt.WEIGHTS]))
        trainable = self.info["trainable"]
        missing = [n for n in trainable if n not in weights]
        if missing:
            raise ModelLoadError(f"The weights in {self.path!r} lack trainable parameters {missing[:8]}; "
                                 "export it again.")
        params = {n: jnp.asarray(weights[n]) for n in trainable}
        buffers = {n: jnp.asarray(v) for n, v in weights.items() if n not in params}
        arrays = fmt.weights_of(self.path, members[TRAIN_STATE])
        opt_state = optim.init_state(self.config, params)
        if self.info["opt_state"] == "stored":
            opt_state = _restore(self.path, "opt", opt_state, arrays)
        if "rng" not in arrays:
            raise ModelLoadError(f"The train state in {self.path!r} has no RNG key; export it again.")
        return TrainState(params, buffers, opt_state, int(self.info["step"]), jax.random.wrap_key_data(arrays["rng"]))

    # -- choosing how to run --
    def _pick(self, members, prefer_graph: bool):
        member = fmt.exported_member(self.platform)
        why_not = exportable(self.strategy)
        if why_not is not None:
            return None, *self._relower_or_fail(why_not)
        if self.strategy.precision != self.info["precision"]:
            return None, *self._relower_or_fail(f"its executables compute in {self.info['precision']}, and "
                                                f"{self.strategy.precision} was asked for")
        if prefer_graph and self.graph is not None:
            why = "re-lowering from the Graph, as asked (prefer_graph=True)"
            return None, "relowered", why + fmt.lowering_moved(self.manifest)
        if member not in members:
            return None, *self._relower_or_fail(f"it was exported for {self.exported_platforms or 'no platform'}, "
                                                f"not for this machine's {self.platform!r}")
        try:
            exported = jax.export.deserialize(bytearray(members[member]))
            exported.mlir_module()  # NOTE: parse now, so a newer jax's StableHLO falls back here (reader.py)
        except Exception as e:
            return None, *self._relower_or_fail(
                f"its {member}, written by jax {self.manifest.get('jax_version', '?')}, cannot be read by this "
                f"jax {jax.__version__} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
        (_, _, _, feeds, _, _), _ = jax.tree_util.tree_unflatten(exported.in_tree, exported.in_avals)
        self.exported_shapes = {k: tuple(v.shape) for k, v in feeds.items()}
        return exported, "exported", f"running the {self.platform} train step exported in {member}"

    def _relower_or_fail(self, reason: str) -> tuple[str, str]:
        if self.graph is None:
            raise ModelLoadError(f"Cannot train {self.path!r} here: {reason}, and it holds no Graph to re-lower "
                                 f"from. Export it again with platforms=(..., {self.platform!r}) and its Graph.")
        return "relowered", f"re-lowering from the Graph: {reason}{fmt.lowering_moved(self.manifest)}"

    # -- training --
    def feeds(self, args, kwargs) -> dict[str, Any]:
        bound = feeds_mod.bind(self.feeds_spec, args, kwargs)
        return {f.name: feeds_mod.check(f, bound[f.name]) for f in self.feeds_spec}

    def __call__(self, *args, **kwargs) -> float | list[float]:
        """One optimizer step (k of them, on stacked inputs, with Strategy(steps_per_call=k))."""
        if self.exported is not None:
            feeds = self.feeds(args, kwargs)
            misfit = fmt.misfit(feeds, self.exported_shapes)
            if misfit is None:
                self.mode, self.why = "exported", self._exported_why
                return self._exported_step(feeds)
            if self.graph is None:
                raise FeedError(f"{misfit}; {self.path!r} holds no Graph to compile other shapes from. "
                                "Export it again with example_inputs of these shapes, or keep the Graph in it.")
            self.mode, self.why = "relowered", f"re-lowering from the Graph: {misfit}"
        return self._relowered_step(args, kwargs)

    def _exported_step(self, feeds) -> float:
        s = self.state
        key_data = jax.random.key_data(jax.random.fold_in(s.key, s.step))
        lr = jnp.asarray(self.lr(), jnp.float32)
        exe = self._executable(feeds, key_data, lr)
        params, buffers, opt_state, loss, fetches, finite = exe(s.params, s.buffers, s.opt_state, feeds, key_data, lr)
        loss = float(loss)
        n = len(self.manifest["fetches"])
        if not bool(finite):
            # NOTE: as TrainStep: the step returned the old params and state; buffers and step stay.
            self.state = TrainState(params, s.buffers, opt_state, s.step, s.key)
            fail_on_false_flags(fetches[n:], self.manifest.get("checks", []))
            raise TrainingError(_not_finite(s.step, loss))
        self.state = TrainState(params, buffers, opt_state, s.step + 1, s.key)
        self.last_outputs = list(fetches[1:n])
        return loss

    def _executable(self, feeds, key_data, lr):
        sig = tuple((k, tuple(v.shape), str(v.dtype)) for k, v in sorted(feeds.items()))
        exe = self._runs.get(sig)
        if exe is None:
            s = self.state
            shapes = {k: list(np.shape(v)) for k, v in feeds.items()}
            with compile_progress(f"{os.path.basename(self.path)} train step for {shapes}"):
                # NOTE: params and optimizer state are donated, as in TrainStep: one copy on the device.
                exe = jax.jit(self.exported.call, donate_argnums=(0, 2)).lower(
                    s.params, s.buffers, s.opt_state, feeds, key_data, lr).compile()
            self._runs[sig] = exe
        return exe

    def _relowered_step(self, args, kwargs):
        runner = self._step_runner()
        s = self.state
        feeds = [self.feeds(a, k) for a, k in runner.split(args, kwargs)]
        lrs = [float(self.schedule.lr_at(self.lr_offset + s.step + i)) for i in range(len(feeds))]
        result = runner(s, feeds, lrs)
        self.state, self.last_outputs = result.state, result.outputs
        if result.error:
            raise (CheckFailedError if result.failed else TrainingError)(result.error)
        return result.losses[0] if runner.steps_per_call == 1 else result.losses

    def _step_runner(self):
        if self._runner is None:
            # NOTE: TrainStep's own runner, so a re-lowered step gives the in-process losses under
            # every Strategy (the SPMD engine for anything but the default).
            from ..parallel.tensor_plan import tensor_plan_for
            from ..runtime.step_runner import StepRunner
            try:
                plan = tensor_plan_for(self.graph, self.stable_names(), self.strategy)
                self._runner = StepRunner(self.graph, self.config, self.strategy, None, plan)
            except PaddleXlaError as e:
                raise ModelLoadError(f"Cannot re-lower the train step in {self.path!r} here: {e}") from e
        return self._runner

    # -- weights, checkpoints, export --
    def weights(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in {**self.state.params, **self.state.buffers}.items()}

    def fingerprint(self) -> str:
        return self.info["fingerprint"]

    def stable_names(self) -> dict[str, str]:
        return dict(self.info.get("names") or {})

    def save_checkpoint(self, path: str) -> None:
        """The same file TrainStep.save_checkpoint writes (keyed by state_dict names): either resumes from it."""
        checkpoint.save(path, self.state, self.fingerprint(),
                        {"lr_offset": self.lr_offset, "schedule": self.schedule.to_dict()}, names=self.stable_names())

    def load_checkpoint(self, path: str) -> None:
        self.state, extra = checkpoint.load(path, self.state, self.fingerprint(), names=self.stable_names())
        self.lr_offset = int(extra.get("lr_offset", 0))

    def export(self, path: str, platforms: Sequence[str] | None = None, example_inputs=None) -> dict:
        """Write the artifact again with the current weights, optimizer state and step."""
        platforms = platforms or self.exported_platforms or [self.platform]
        if example_inputs is None:
            example_inputs = self._example_inputs()
        return export_train(self, path, platforms, example_inputs)

    def _example_inputs(self) -> dict[str, np.ndarray] | None:
        """Zeros in the concrete shapes it was exported for, so a re-export keeps them."""
        for entry in self.manifest.get("exported", {}).values():
            if entry.get("shapes") == "concrete":
                dtypes = {f.name: f.dtype for f in self.feeds_spec}
                return {k: np.zeros(v, jax_dtype(dtypes[k])) for k, v in entry["feed_shapes"].items()}
        return None

    def __repr__(self) -> str:
        return (f"TrainArtifact({os.path.basename(self.path)!r}, step={self.step}, mode={self.mode!r}, "
                f"platform={self.platform!r}, exported for {self.exported_platforms})")


def _not_finite(step: int, loss: float) -> str:
    return (f"The loss or a gradient is not finite at step {step} (loss = {loss}); the weights and "
            "optimizer state were left as they were before this step. Lower the learning rate, check "
            "the inputs for NaN/Inf, or use precision='fp16' loss scaling, which skips such steps.")


def _train_info(path: str, manifest: Mapping) -> dict:
    info = manifest.get("train")
    need = ("step", "lr_offset", "trainable", "fingerprint", "precision", "opt_state")
    if not isinstance(info, Mapping) or any(k not in info for k in need):
        raise ModelLoadError(f"The manifest of {path!r} says kind 'train' but lacks its train entry "
                             f"({list(need)}); export it again.")
    for member in (OPTIMIZER, TRAIN_STATE):
        if member not in manifest["members"]:
            raise ModelLoadError(f"{path!r} is a train artifact without its {member}; export it again.")
    return dict(info)


def _optimizer(path: str, members: Mapping[str, bytes]):
    try:
        d = json.loads(members[OPTIMIZER])
        return optim.config_from_dict(d["config"]), lr_lib.schedule_from_dict(d["schedule"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"The optimizer in {path!r} cannot be read by this paddle_xla ({e}); "
                             "export it again, or upgrade paddle_xla.") from None


def _strategy(path: str, members: Mapping[str, bytes], override) -> Strategy:
    if isinstance(override, Strategy):
        return override
    try:
        d = override if override is not None else json.loads(members.get(fmt.STRATEGY) or b"{}")
        return Strategy.from_dict(d)
    except PaddleXlaError as e:
        raise ModelLoadError(f"The Strategy of {path!r} does not fit this machine ({e}). Load it with "
                             "strategy=paddle_xla.Strategy(...) for this machine's devices.") from None
    except (json.JSONDecodeError, TypeError) as e:
        raise ModelLoadError(f"The Strategy in {path!r} cannot be read ({e}); export it again.") from None


def _restore(path: str, prefix: str, template, arrays: Mapping[str, np.ndarray]):
    """`template`'s tree with its leaves read from `arrays` by checkpoint.py's names."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    names = [prefix + jax.tree_util.keystr(p) for p, _ in leaves]
    bad = [n for n, (_, leaf) in zip(names, leaves) if n not in arrays or arrays[n].shape != np.shape(leaf)]
    if bad:
        raise ModelLoadError(f"The optimizer state in {path!r} does not fit its optimizer: {bad[:4]} are "
                             "missing or of another shape. Export it again.")
    return jax.tree_util.tree_unflatten(treedef, [jnp.asarray(arrays[n]) for n in names])


__all__ = ["TrainArtifact", "export_train", "step_fn", "exportable"]
