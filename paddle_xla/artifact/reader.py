"""Paddle-free exported artifacts (`*.pxa`): load one and run it where only JAX is installed.

A .pxa (container.py) holds the Graph, the weights, the Strategy and one jax.export executable
per platform it was exported for; its manifest records how each was lowered. A model exported in
bf16 runs in bf16 wherever it is loaded, re-lowered or not. A train step's artifact (kind "train")
opens as a train_reader.TrainArtifact. One exported with synthetic_weights stores only its small
weights: see synthetic_weights.py.

This module never imports paddle: the Graph, lowering and runtime it uses are Paddle-free.
"""

from __future__ import annotations

import io as _io
import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from .. import x64
from ..errors import FeedError, ModelLoadError, PaddleXlaError
from ..lowering.interpreter import draws_random, fail_on_false_flags
from ..runtime import feeds as feeds_mod
from ..runtime.executables import ExecutableCache, shapes_text
from ..runtime.held import HeldWeights
from ..runtime.xla_options import has_convolutions, options_for
from ..strategy import Strategy
from . import choice, synthetic_weights
from .container import (  # noqa: F401
    FORMAT_VERSION,
    GRAPH,
    MANIFEST,
    STRATEGY,
    WEIGHTS,
    ManifestViews,
    current_platform,
    graph_of,
    lowering_moved,
    misfit,
    read,
    recorded_precision,
    sha256,
    shapes_of,
    tensors_of,
    weights_of,
)

if TYPE_CHECKING:
    from ..runtime.compiled import CompiledModel
    from .generator_reader import GeneratorArtifact
    from .train_reader import TrainArtifact


# ---- running ----------------------------------------------------------------------------------
@x64.enabled
def load(
    path: str, prefer_graph: bool = False, seed: int | None = None, key: jax.Array | None = None, **train_options: Any
) -> Artifact | GeneratorArtifact | TrainArtifact:
    """Open a .pxa. It runs its serialized executable when one was exported for this platform
    (`mode == "exported"`), else re-lowers its Graph (`mode == "relowered"`); `why` says why.
    Random ops draw anew on every call, starting from the exporter's key, or from `seed` / `key`.
    A train step's artifact opens as a train_reader.TrainArtifact (`train_options` go to it), a
    generator's as a generator_reader.GeneratorArtifact."""
    manifest, members = read(path)
    if manifest.get("kind") == "generator":
        from .generator_reader import GeneratorArtifact

        return GeneratorArtifact(path, manifest, members, prefer_graph, seed=seed or 0)
    if manifest.get("kind") == "train":
        from .train_reader import TrainArtifact

        return TrainArtifact(path, manifest, members, prefer_graph, **train_options)
    return Artifact(path, manifest, members, prefer_graph, seed=seed, key=key)


@x64.methods
class Artifact(ManifestViews):
    """An exported model: `artifact(*inputs) -> outputs` (NumPy in, NumPy out), as CompiledModel.

    Call i of a program that draws random numbers draws from fold_in(key, i), as the exporter's
    CompiledModel did; `seed` or `key` replaces the exporter's key."""

    def __init__(
        self,
        path: str,
        manifest: dict,
        members: Mapping[str, bytes],
        prefer_graph: bool = False,
        seed: int | None = None,
        key: jax.Array | None = None,
    ) -> None:
        self.path, self.manifest = path, manifest
        self.feeds_spec = tensors_of(manifest["feeds"])
        self.fetches_spec = tensors_of(manifest["fetches"])
        self.weights = synthetic_weights.fill(manifest, weights_of(path, members[WEIGHTS]))
        self.graph = graph_of(path, members)
        self.platform = current_platform()
        self.key_data = _key_data(manifest, seed, key)
        # NOTE: with no Graph to ask, every call gets its own key (a ~0.1 ms host fold_in).
        self._random = draws_random(self.graph) if self.graph is not None else True
        self._calls = itertools.count()
        self._relowered: CompiledModel | None = None
        self.exported, self.mode, self.why = choice.pick(
            path, manifest, members, self.platform, self.graph is not None, prefer_graph
        )
        self._exported_why = self.why
        if self.exported is not None:
            self._exported_state()
            self._runs = ExecutableCache()

    @property
    def output_names(self) -> list[str]:
        return [f.name for f in self.fetches_spec]

    def _exported_state(self) -> None:
        (params, buffers, feeds, _), _ = jax.tree_util.tree_unflatten(self.exported.in_tree, self.exported.in_avals)
        # NOTE: the executable's own argument tree says which weights are params and which buffers,
        # so this works even with no Graph in the artifact.
        # NOTE: weights the executable reads in another layout or precision (held.py), prepared once here
        held = HeldWeights.from_manifest(
            self.manifest.get("exported", {}).get(self.platform, {}), recorded_precision(self.manifest)
        )
        laid_out = held.all_prepared(self.weights)
        self.params = jax.device_put({k: laid_out[k] for k in params})
        self.buffers = jax.device_put({k: laid_out[k] for k in buffers})
        self.exported_shapes = {k: tuple(v.shape) for k, v in feeds.items()}

    # -- calling --
    def check_feeds(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return feeds_mod.checked(self.feeds_spec, args, kwargs)

    def call_key_data(self) -> np.ndarray:
        """The raw key of the next call: a fresh one per call when the program draws random numbers."""
        if not self._random:
            return self.key_data
        # NOTE: jax takes a NumPy key here (its annotation says Array)
        key = jax.random.fold_in(jax.random.wrap_key_data(self.key_data), next(self._calls))  # type: ignore[arg-type]
        return np.asarray(jax.random.key_data(key))

    def run(self, *args: Any, **kwargs: Any) -> list[jax.Array]:
        """Outputs as device arrays (no host copy)."""
        feeds = self.check_feeds(args, kwargs)
        misfit = self._misfit(feeds) if self.exported is not None else "no executable for this platform"
        exe = None
        if misfit is None:
            exe, misfit = self._executable_or_why_not(feeds)
        if exe is not None:
            self.mode, self.why = "exported", self._exported_why
            outs = exe(self.params, self.buffers, feeds, self.call_key_data())
            n = len(self.fetches_spec)
            fail_on_false_flags(outs[n:], self.manifest.get("checks", []))
            return list(outs[:n])
        if self.graph is None:
            raise FeedError(
                f"{misfit}; {self.path!r} holds no Graph to compile other shapes from. "
                "Export it again with example_inputs of these shapes, or keep the Graph in it."
            )
        if self.exported is not None:
            self.mode, self.why = "relowered", f"re-lowering from the Graph: {misfit}{lowering_moved(self.manifest)}"
        key = jax.random.wrap_key_data(self.call_key_data())  # type: ignore[arg-type]  # NOTE: a NumPy key, as above
        return self._relowered_model().run_checked(feeds, key)

    def __call__(self, *args: Any, **kwargs: Any) -> list[np.ndarray] | np.ndarray:
        outs = [np.asarray(o) for o in self.run(*args, **kwargs)]
        return outs[0] if len(outs) == 1 else outs

    def _misfit(self, feeds: Mapping[str, np.ndarray]) -> str | None:
        return misfit(feeds, self.exported_shapes)

    def _executable_or_why_not(self, feeds: Mapping[str, np.ndarray]) -> tuple[Callable | None, str | None]:
        """The exported executable for these feeds' shapes, or why it cannot take them: symbolic
        dimensions can carry constraints (a reshape to [-1, 4] needs batch*6 divisible by 4) that only
        these concrete shapes violate."""
        try:
            return self._executable(feeds), None
        except Exception as e:  # NOTE: JAX's shape refinement fails with a bare "Error refining shapes"
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            return None, f"the exported program's symbolic shapes do not take {shapes_of(feeds)} ({first})"

    def _executable(self, feeds: Mapping[str, np.ndarray]) -> Callable:
        return self._runs.get(
            feeds,
            lambda: (
                jax.jit(self.exported.call)
                .lower(self.params, self.buffers, feeds, self.key_data)
                .compile(compiler_options=options_for(self._convolves()))
            ),
            lambda sig: f"{os.path.basename(self.path)} for {shapes_text(sig)}",
        )

    def _convolves(self) -> bool:
        """Whether the program convolves: the manifest says (since LOWERING_VERSION 4's exports), else the Graph."""
        if "convolutions" in self.manifest:
            return bool(self.manifest["convolutions"])
        return self.graph is not None and has_convolutions(self.graph)

    def _relowered_model(self) -> CompiledModel:
        if self._relowered is None:
            from ..runtime.compiled import CompiledModel

            try:
                # NOTE: in the precision it was exported in; its keys come from this artifact's calls.
                assert self.graph is not None  # NOTE: run() re-lowers only with a Graph
                key = jax.random.wrap_key_data(self.key_data)  # type: ignore[arg-type]  # NOTE: a NumPy key, as above
                model = CompiledModel(
                    self.graph, self.weights, key=key, strategy=Strategy(precision=recorded_precision(self.manifest))
                )
            except PaddleXlaError as e:
                raise ModelLoadError(f"Cannot re-lower the Graph in {self.path!r} here: {e}") from e
            self._relowered = model
        return self._relowered

    def __repr__(self) -> str:
        return (
            f"Artifact({os.path.basename(self.path)!r}, mode={self.mode!r}, platform={self.platform!r}, "
            f"exported for {self.exported_platforms})"
        )


def _key_data(manifest: Mapping, seed: int | None, key: jax.Array | None) -> np.ndarray:
    if key is not None:
        return np.asarray(jax.random.key_data(key), dtype=np.uint32)
    if seed is not None:
        return np.asarray(jax.random.key_data(jax.random.key(seed)), dtype=np.uint32)
    return np.asarray(manifest.get("key_data", [0, 0]), dtype=np.uint32)


# ---- outputs on disk (the CLI's `run`) ----------------------------------------------------------
def save_outputs(path: str, outputs: Sequence[np.ndarray], names: Sequence[str]) -> list[str]:
    """One output -> `path`; several -> an .npz keyed by output name, or path_0.npy, path_1.npy, ..."""
    from ..files import atomic_write

    if path.endswith(".npz"):
        buf = _io.BytesIO()
        np.savez(buf, **dict(zip(names, outputs)))  # type: ignore[arg-type]  # NOTE: numpy's stub types **kwds as its flags
        atomic_write(path, buf.getvalue())
        return [path]
    stem = path[:-4] if path.endswith(".npy") else path
    paths = [f"{stem}.npy"] if len(outputs) == 1 else [f"{stem}_{i}.npy" for i in range(len(outputs))]
    for p, out in zip(paths, outputs):
        buf = _io.BytesIO()
        np.save(buf, np.asarray(out))
        atomic_write(p, buf.getvalue())
    return paths
