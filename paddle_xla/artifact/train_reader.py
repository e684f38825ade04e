"""Open a training artifact (train_writer.py says what it holds) and continue training it.

`paddle_xla.artifact.load(path)` opens one as a TrainArtifact: `s(*inputs, *labels) -> loss`
continues from the exporter's last step with the losses the exporter's TrainStep would have given;
its checkpoints are TrainStep's. Nothing here imports paddle."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import x64
from ..errors import CheckFailedError, FeedError, ModelLoadError, PaddleXlaError, TrainingError
from ..lowering.interpreter import fail_on_false_flags
from ..ops.util import dtype as jax_dtype
from ..runtime import feeds as feeds_mod
from ..runtime.executables import ExecutableCache, shapes_text
from ..strategy import Strategy
from ..train import checkpoint, optim
from ..train import lr as lr_lib
from ..train.step import TrainState, not_finite_message
from . import choice, synthetic_weights
from . import container as fmt
from .train_writer import OPTIMIZER, TRAIN_STATE, export_train, exportable


@x64.methods
class TrainArtifact(fmt.ManifestViews):
    """An exported train step: `s(*inputs, *labels) -> loss`, continuing where the exporter stopped.

    Runs the executable exported for this platform (`mode == "exported"`) when the Strategy and
    precision match it, else re-lowers the Graph with the Strategy (`mode == "relowered"`).
    `strategy=` overrides the Strategy it was exported with (e.g. precision="bf16" on a GPU)."""

    def __init__(
        self,
        path: str,
        manifest: dict,
        members: Mapping[str, bytes],
        prefer_graph: bool = False,
        strategy: Strategy | Mapping | None = None,
    ):
        self.path, self.manifest = path, manifest
        self.info = _train_info(path, manifest)
        self.graph = fmt.graph_of(path, members)
        self.feeds_spec = fmt.tensors_of(manifest["feeds"])
        self.config, self.schedule = _optimizer(path, members)
        self.strategy = _strategy(path, members, strategy)
        self.lr_offset = int(self.info["lr_offset"])
        self.state = self._initial_state(members)
        self.platform = fmt.current_platform()
        self._runner, self._runs = None, ExecutableCache()
        self.last_outputs: list = []
        self.exported, self.mode, self.why = self._pick(members, prefer_graph)
        self._exported_why = self.why

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
            raise ModelLoadError(
                f"The weights in {self.path!r} lack trainable parameters {missing[:8]}; export it again."
            )
        params = {n: jnp.asarray(weights[n]) for n in trainable}
        buffers = {n: jnp.asarray(v) for n, v in weights.items() if n not in params}
        arrays = fmt.weights_of(self.path, members[TRAIN_STATE])
        opt_state = optim.init_state(self.config, params)
        if self.info["opt_state"] == "stored":
            opt_state = _restore(self.path, "opt", opt_state, arrays)
        if "rng" not in arrays:
            raise ModelLoadError(f"The train state in {self.path!r} has no RNG key; export it again.")
        key = jax.random.wrap_key_data(arrays["rng"])  # type: ignore[arg-type]  # NOTE: jax takes a NumPy key
        return TrainState(params, buffers, opt_state, int(self.info["step"]), key)

    # -- choosing how to run --
    def _pick(self, members, prefer_graph: bool):
        refusal = exportable(self.strategy)
        if refusal is None and self.strategy.precision != self.info["precision"]:
            refusal = (
                f"its executables compute in {self.info['precision']}, and {self.strategy.precision} was asked for"
            )
        exported, mode, why = choice.pick(
            self.path,
            self.manifest,
            members,
            self.platform,
            self.graph is not None,
            prefer_graph,
            refusal=refusal,
            what="train step",
            verb="train",
        )
        if exported is not None:
            (_, _, _, feeds, _, _), _ = jax.tree_util.tree_unflatten(exported.in_tree, exported.in_avals)
            self.exported_shapes = {k: tuple(v.shape) for k, v in feeds.items()}
        return exported, mode, why

    # -- training --
    def feeds(self, args, kwargs) -> dict[str, Any]:
        return feeds_mod.checked(self.feeds_spec, args, kwargs)

    def __call__(self, *args, **kwargs) -> float | list[float]:
        """One optimizer step (k of them, on stacked inputs, with Strategy(steps_per_call=k))."""
        if self.exported is not None:
            feeds = self.feeds(args, kwargs)
            misfit = fmt.misfit(feeds, self.exported_shapes)
            if misfit is None:
                self.mode, self.why = "exported", self._exported_why
                return self._exported_step(feeds)
            if self.graph is None:
                raise FeedError(
                    f"{misfit}; {self.path!r} holds no Graph to compile other shapes from. "
                    "Export it again with example_inputs of these shapes, or keep the Graph in it."
                )
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
            raise TrainingError(not_finite_message(s.step, loss))
        self.state = TrainState(params, buffers, opt_state, s.step + 1, s.key)
        self.last_outputs = list(fetches[1:n])
        return loss

    def _executable(self, feeds, key_data, lr):
        s = self.state
        # NOTE: params and optimizer state are donated, as in TrainStep: one copy on the device.
        return self._runs.get(
            feeds,
            lambda: (
                jax.jit(self.exported.call, donate_argnums=(0, 2))
                .lower(s.params, s.buffers, s.opt_state, feeds, key_data, lr)
                .compile()
            ),
            lambda sig: f"{os.path.basename(self.path)} train step for {shapes_text(sig)}",
        )

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
        checkpoint.save(
            path,
            self.state,
            self.fingerprint(),
            {"lr_offset": self.lr_offset, "schedule": self.schedule.to_dict()},
            names=self.stable_names(),
        )

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
        return (
            f"TrainArtifact({os.path.basename(self.path)!r}, step={self.step}, mode={self.mode!r}, "
            f"platform={self.platform!r}, exported for {self.exported_platforms})"
        )


def _train_info(path: str, manifest: Mapping) -> dict:
    info = manifest.get("train")
    need = ("step", "lr_offset", "trainable", "fingerprint", "precision", "opt_state")
    if not isinstance(info, Mapping) or any(k not in info for k in need):
        raise ModelLoadError(
            f"The manifest of {path!r} says kind 'train' but lacks its train entry ({list(need)}); export it again."
        )
    for member in (OPTIMIZER, TRAIN_STATE):
        if member not in manifest["members"]:
            raise ModelLoadError(f"{path!r} is a train artifact without its {member}; export it again.")
    return dict(info)


def _optimizer(path: str, members: Mapping[str, bytes]):
    try:
        d = json.loads(members[OPTIMIZER])
        return optim.config_from_dict(d["config"]), lr_lib.schedule_from_dict(d["schedule"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, UnicodeDecodeError) as e:
        raise ModelLoadError(
            f"The optimizer in {path!r} cannot be read by this paddle_xla ({e}); "
            "export it again, or upgrade paddle_xla."
        ) from None


def _strategy(path: str, members: Mapping[str, bytes], override) -> Strategy:
    if isinstance(override, Strategy):
        return override
    try:
        d = override if override is not None else json.loads(members.get(fmt.STRATEGY) or b"{}")
        return Strategy.from_dict(d)
    except PaddleXlaError as e:
        raise ModelLoadError(
            f"The Strategy of {path!r} does not fit this machine ({e}). Load it with "
            "strategy=paddle_xla.Strategy(...) for this machine's devices."
        ) from None
    except (json.JSONDecodeError, TypeError) as e:
        raise ModelLoadError(f"The Strategy in {path!r} cannot be read ({e}); export it again.") from None


def _restore(path: str, prefix: str, template, arrays: Mapping[str, np.ndarray]):
    """`template`'s tree with its leaves read from `arrays` by checkpoint.py's names."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    names = [prefix + jax.tree_util.keystr(p) for p, _ in leaves]
    bad = [n for n, (_, leaf) in zip(names, leaves) if n not in arrays or arrays[n].shape != np.shape(leaf)]
    if bad:
        raise ModelLoadError(
            f"The optimizer state in {path!r} does not fit its optimizer: {bad[:4]} are "
            "missing or of another shape. Export it again."
        )
    return jax.tree_util.tree_unflatten(treedef, [jnp.asarray(arrays[n]) for n in names])
