"""Paddle-free exported artifacts (`*.pxa`): load one and run it where only JAX is installed.

A .pxa is one zip file:
  manifest.json            format version, versions, kind, feeds/fetches, sha256 of every other member
  graph.json               the Graph (Graph.to_json), to re-lower on platforms not exported for
  weights.safetensors      every persistable, by parameter name
  strategy.json            the Strategy it was exported with (an inference model's: its precision)
  exported/<platform>.bin  jax.export serialized StableHLO of f(params, buffers, feeds, key_data)
The manifest's `lowering` entry records how each executable was lowered: LOWERING_VERSION and the
LoweringPolicy per platform (precision, the target it is tuned for, layouts). A model exported in
bf16 runs in bf16 wherever it is loaded, re-lowered or not.
A train step's artifact (kind "train") adds its optimizer and state: see train_artifact.py. One
exported with synthetic_weights stores only its small weights: see synthetic_weights.py.

This module never imports paddle: the Graph, lowering and runtime it uses are Paddle-free.
"""
from __future__ import annotations

import datetime
import hashlib
import io as _io
import itertools
import json
import os
import zipfile
from typing import Any, Mapping, Sequence

import jax
import numpy as np

from . import feeds as feeds_mod
from . import synthetic_weights, x64
from .cache import compile_progress
from .errors import FeedError, ModelLoadError, PaddleXlaError
from .graph import Graph, Tensor
from .interpreter import draws_random
from .policy import LOWERING_VERSION, PLATFORMS, LoweringPolicy, live_platform  # noqa: F401  (PLATFORMS: export's)
from .strategy import Strategy

FORMAT_VERSION = 1
MANIFEST, GRAPH, WEIGHTS, STRATEGY = "manifest.json", "graph.json", "weights.safetensors", "strategy.json"
current_platform = live_platform


def exported_member(platform: str) -> str:
    return f"exported/{platform}.bin"


def lowering_record(policies: Mapping[str, LoweringPolicy], precision: str) -> dict:
    """The manifest's account of how the program was lowered: for each exported platform, and the
    precision a re-lowering must keep."""
    return {"version": LOWERING_VERSION, "precision": precision,
            "policies": {p: pol.to_dict() for p, pol in policies.items()}}


def recorded_precision(manifest: Mapping) -> str:
    """The precision an artifact computes in (fp32 for one written before precision was recorded)."""
    return (manifest.get("lowering") or {}).get("precision", "fp32")


def lowering_moved(manifest: Mapping) -> str:
    """'' when this paddle_xla lowers as the exporter did, else a sentence saying the numbers may move."""
    version = (manifest.get("lowering") or {}).get("version", 1)
    if version == LOWERING_VERSION:
        return ""
    return (f"; it was lowered with lowering version {version} (paddle_xla {manifest.get('paddle_xla_version', '?')}), "
            f"this paddle_xla lowers with version {LOWERING_VERSION}, so its numbers may differ slightly "
            "from the exporter's")


def paddle_xla_version() -> str:
    from importlib import metadata
    try:
        return metadata.version("paddle_xla")
    except metadata.PackageNotFoundError:
        return "unknown"


# ---- writing ----------------------------------------------------------------------------------
def tensor_spec(t: Tensor) -> dict:
    return {"name": t.name, "shape": list(t.shape), "dtype": t.dtype}


def weights_bytes(weights: Mapping[str, np.ndarray]) -> bytes:
    from safetensors.numpy import save
    return save({k: np.ascontiguousarray(np.asarray(v)) for k, v in weights.items()})


def pack(members: Mapping[str, bytes], manifest: Mapping[str, Any]) -> tuple[bytes, dict]:
    """The .pxa bytes, and its manifest: `manifest` plus versions and each member's sha256."""
    manifest = dict(manifest, format_version=FORMAT_VERSION, paddle_xla_version=paddle_xla_version(),
                    jax_version=jax.__version__,
                    created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    members={name: {"sha256": _sha256(data), "size": len(data)} for name, data in members.items()})
    buf = _io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(MANIFEST, json.dumps(manifest, indent=1), compress_type=zipfile.ZIP_DEFLATED)
        for name, data in members.items():
            # NOTE: weights and executables are stored, not compressed: float data hardly shrinks, and
            # a stored member could later be memory-mapped straight out of the file.
            kind = zipfile.ZIP_DEFLATED if name.endswith(".json") else zipfile.ZIP_STORED
            z.writestr(name, data, compress_type=kind)
    return buf.getvalue(), manifest


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- reading ----------------------------------------------------------------------------------
def read(path: str) -> tuple[dict, dict[str, bytes]]:
    """(manifest, members) of the .pxa at `path`, each member checked against its sha256."""
    try:
        with zipfile.ZipFile(path) as z:
            manifest = _manifest(path, z)
            return manifest, {name: _member(path, z, name, info) for name, info in manifest["members"].items()}
    except FileNotFoundError:
        raise ModelLoadError(f"No artifact at {path!r}. Write one with paddle_xla.export.export(model, "
                             f"{path!r}).") from None
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise ModelLoadError(f"{path!r} is truncated or is not a paddle_xla artifact ({e}). "
                             "Copy it again, or export it again.") from None


def _manifest(path: str, z: zipfile.ZipFile) -> dict:
    try:
        manifest = json.loads(z.read(MANIFEST))
    except KeyError:
        raise ModelLoadError(f"{path!r} has no {MANIFEST}: it is not a paddle_xla artifact.") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"The {MANIFEST} of {path!r} is corrupt ({e}); export it again.") from None
    version = manifest.get("format_version")
    if not isinstance(version, int):
        raise ModelLoadError(f"The {MANIFEST} of {path!r} has no valid format version; export it again.")
    if version > FORMAT_VERSION:
        raise ModelLoadError(
            f"{path!r} has artifact format version {version} (written by paddle_xla "
            f"{manifest.get('paddle_xla_version', '?')}), but this paddle_xla ({paddle_xla_version()}) reads "
            f"format version {FORMAT_VERSION} and older. Upgrade paddle_xla: pip install -U paddle_xla.")
    missing = [k for k in ("members", "feeds", "fetches") if k not in manifest]
    if missing or WEIGHTS not in manifest["members"]:
        raise ModelLoadError(f"The {MANIFEST} of {path!r} lacks {missing or [WEIGHTS]}; export it again.")
    return manifest


def _member(path: str, z: zipfile.ZipFile, name: str, info: Mapping) -> bytes:
    try:
        data = z.read(name)
    except KeyError:
        raise ModelLoadError(f"{path!r} lacks member {name!r}, which its manifest lists; "
                             "the file was altered. Export it again.") from None
    except zipfile.BadZipFile as e:  # NOTE: zip's own CRC check fails before ours can
        raise ModelLoadError(f"Member {name!r} of {path!r} is corrupt ({e}); export it again.") from None
    if _sha256(data) != info.get("sha256"):
        raise ModelLoadError(f"Member {name!r} of {path!r} does not match its sha256 in the manifest: "
                             "it is truncated or was tampered with. Export it again.")
    return data


def _weights(path: str, data: bytes) -> dict[str, np.ndarray]:
    from safetensors.numpy import load
    try:
        return dict(load(data))
    except Exception as e:  # safetensors raises its own error types for bad headers
        raise ModelLoadError(f"The weights in {path!r} are corrupt ({e}); export it again.") from None


def _graph(path: str, members: Mapping[str, bytes]) -> Graph | None:
    if GRAPH not in members:
        return None
    try:
        return Graph.from_json(members[GRAPH].decode())
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"The Graph in {path!r} is corrupt ({e}); export it again.") from None


def _tensors(specs) -> tuple[Tensor, ...]:
    return tuple(Tensor(s["name"], -1, tuple(s["shape"]), s["dtype"]) for s in specs)


# ---- running ----------------------------------------------------------------------------------
@x64.enabled
def load(path: str, prefer_graph: bool = False, seed: int | None = None, key=None, **train_options) -> "Artifact":
    """Open a .pxa. It runs its serialized executable when one was exported for this platform
    (`mode == "exported"`), else re-lowers its Graph (`mode == "relowered"`); `why` says why.
    Random ops draw anew on every call, starting from the exporter's key, or from `seed` / `key`.
    A train step's artifact opens as a train_artifact.TrainArtifact (`train_options` go to it)."""
    manifest, members = read(path)
    if manifest.get("kind") == "train":
        from .train_artifact import TrainArtifact
        return TrainArtifact(path, manifest, members, prefer_graph, **train_options)
    return Artifact(path, manifest, members, prefer_graph, seed=seed, key=key)


@x64.methods
class Artifact:
    """An exported model: `artifact(*inputs) -> outputs` (NumPy in, NumPy out), as CompiledModel.

    Call i of a program that draws random numbers draws from fold_in(key, i), as the exporter's
    CompiledModel did; `seed` or `key` replaces the exporter's key."""

    def __init__(self, path: str, manifest: dict, members: Mapping[str, bytes], prefer_graph: bool = False,
                 seed: int | None = None, key=None):
        self.path, self.manifest = path, manifest
        self.feeds_spec = _tensors(manifest["feeds"])
        self.fetches_spec = _tensors(manifest["fetches"])
        self.weights = synthetic_weights.fill(manifest, _weights(path, members[WEIGHTS]))
        self.graph = _graph(path, members)
        self.platform = current_platform()
        self.key_data = _key_data(manifest, seed, key)
        # NOTE: with no Graph to ask, every call gets its own key (a ~0.1 ms host fold_in).
        self._random = draws_random(self.graph) if self.graph is not None else True
        self._calls = itertools.count()
        self._relowered = None
        self.exported, self.mode, self.why = self._pick(members, prefer_graph)
        self._exported_why = self.why
        if self.exported is not None:
            self._exported_state()
            self._runs: dict[tuple, Any] = {}

    @property
    def input_names(self) -> list[str]:
        return [f.name for f in self.feeds_spec]

    @property
    def output_names(self) -> list[str]:
        return [f.name for f in self.fetches_spec]

    @property
    def exported_platforms(self) -> list[str]:
        return sorted(self.manifest.get("exported", {}))

    # -- choosing how to run --
    def _pick(self, members, prefer_graph: bool):
        member = exported_member(self.platform)
        if prefer_graph and self.graph is not None:
            why = "re-lowering from the Graph, as asked (prefer_graph=True)"
            return None, "relowered", why + lowering_moved(self.manifest)
        if member not in members:
            return None, *self._relower_or_fail(f"it was exported for {self.exported_platforms or 'no platform'}, "
                                                f"not for this machine's {self.platform!r}")
        try:
            exported = jax.export.deserialize(bytearray(members[member]))
            # NOTE: the StableHLO inside is parsed only when first compiled; parse it now, so that one
            # written by a newer jax (seen: 0.11.2's, read by 0.10.2) falls back to the Graph here.
            exported.mlir_module()
        except Exception as e:
            made_by = self.manifest.get("jax_version", "?")
            return None, *self._relower_or_fail(
                f"its {member}, written by jax {made_by}, cannot be read by this jax {jax.__version__} "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
        return exported, "exported", f"running the {self.platform} executable exported in {member}"

    def _relower_or_fail(self, reason: str) -> tuple[str, str]:
        if self.graph is None:
            raise ModelLoadError(
                f"Cannot run {self.path!r} here: {reason}, and it holds no Graph to re-lower from. Export it "
                f"again with platforms=(..., {self.platform!r}) and keep the Graph in it.")
        return "relowered", f"re-lowering from the Graph: {reason}{lowering_moved(self.manifest)}"

    def _exported_state(self):
        (params, buffers, feeds, _), _ = jax.tree_util.tree_unflatten(self.exported.in_tree, self.exported.in_avals)
        # NOTE: the executable's own argument tree says which weights are params and which buffers,
        # so this works even with no Graph in the artifact.
        self.params = jax.device_put({k: self.weights[k] for k in params})
        self.buffers = jax.device_put({k: self.weights[k] for k in buffers})
        self.exported_shapes = {k: tuple(v.shape) for k, v in feeds.items()}

    # -- calling --
    def check_feeds(self, args, kwargs) -> dict[str, np.ndarray]:
        bound = feeds_mod.bind(self.feeds_spec, args, kwargs)
        return {f.name: feeds_mod.check(f, bound[f.name]) for f in self.feeds_spec}

    def call_key_data(self) -> np.ndarray:
        """The raw key of the next call: a fresh one per call when the program draws random numbers."""
        if not self._random:
            return self.key_data
        key = jax.random.fold_in(jax.random.wrap_key_data(self.key_data), next(self._calls))
        return np.asarray(jax.random.key_data(key))

    def run(self, *args, **kwargs) -> list[jax.Array]:
        """Outputs as device arrays (no host copy)."""
        feeds = self.check_feeds(args, kwargs)
        misfit = self._misfit(feeds) if self.exported is not None else "no executable for this platform"
        if misfit is None:
            self.mode, self.why = "exported", self._exported_why
            return list(self._executable(feeds)(self.params, self.buffers, feeds, self.call_key_data()))
        if self.graph is None:
            raise FeedError(f"{misfit}; {self.path!r} holds no Graph to compile other shapes from. "
                            "Export it again with example_inputs of these shapes, or keep the Graph in it.")
        if self.exported is not None:
            self.mode, self.why = "relowered", f"re-lowering from the Graph: {misfit}{lowering_moved(self.manifest)}"
        return self._relowered_model().run_checked(feeds, jax.random.wrap_key_data(self.call_key_data()))

    def __call__(self, *args, **kwargs) -> list[np.ndarray] | np.ndarray:
        outs = [np.asarray(o) for o in self.run(*args, **kwargs)]
        return outs[0] if len(outs) == 1 else outs

    def _misfit(self, feeds: Mapping[str, np.ndarray]) -> str | None:
        return misfit(feeds, self.exported_shapes)

    def _executable(self, feeds):
        sig = tuple((k, tuple(v.shape), str(v.dtype)) for k, v in sorted(feeds.items()))
        exe = self._runs.get(sig)
        if exe is None:
            with compile_progress(f"{os.path.basename(self.path)} for {_shapes(feeds)}"):
                exe = jax.jit(self.exported.call).lower(self.params, self.buffers, feeds, self.key_data).compile()
            self._runs[sig] = exe
        return exe

    def _relowered_model(self):
        if self._relowered is None:
            from .runtime import CompiledModel
            try:
                # NOTE: in the precision it was exported in; its keys come from this artifact's calls.
                model = CompiledModel(self.graph, self.weights, key=jax.random.wrap_key_data(self.key_data),
                                      strategy=Strategy(precision=recorded_precision(self.manifest)))
            except PaddleXlaError as e:
                raise ModelLoadError(f"Cannot re-lower the Graph in {self.path!r} here: {e}") from e
            self._relowered = model
        return self._relowered

    def __repr__(self) -> str:
        return (f"Artifact({os.path.basename(self.path)!r}, mode={self.mode!r}, platform={self.platform!r}, "
                f"exported for {self.exported_platforms})")


def _key_data(manifest: Mapping, seed: int | None, key) -> np.ndarray:
    if key is not None:
        return np.asarray(jax.random.key_data(key), dtype=np.uint32)
    if seed is not None:
        return np.asarray(jax.random.key_data(jax.random.key(seed)), dtype=np.uint32)
    return np.asarray(manifest.get("key_data", [0, 0]), dtype=np.uint32)


def misfit(feeds: Mapping[str, np.ndarray], exported_shapes: Mapping[str, tuple]) -> str | None:
    """Why these inputs do not fit an exported executable's shapes (None when they do)."""
    bound: dict[str, int] = {}
    for name, arr in feeds.items():
        for got, want in zip(arr.shape, exported_shapes[name]):
            if isinstance(want, (int, np.integer)):
                ok = got == want
            else:  # NOTE: a symbolic dimension; the same symbol must take one value across inputs
                ok = got >= 1 and bound.setdefault(str(want), got) == got
            if not ok:
                return (f"input shapes {_shapes(feeds)} do not fit the exported shapes "
                        f"{ {k: _dims(v) for k, v in exported_shapes.items()} }")
    return None


def _dims(shape) -> list:
    return [d if isinstance(d, (int, np.integer)) else str(d) for d in shape]


def _shapes(feeds: Mapping[str, Any]) -> dict[str, list]:
    return {k: list(np.shape(v)) for k, v in feeds.items()}


# ---- outputs on disk (the CLI's `run`) ----------------------------------------------------------
def save_outputs(path: str, outputs: Sequence[np.ndarray], names: Sequence[str]) -> list[str]:
    """One output -> `path`; several -> an .npz keyed by output name, or path_0.npy, path_1.npy, ..."""
    from .io import atomic_write
    if path.endswith(".npz"):
        buf = _io.BytesIO()
        np.savez(buf, **dict(zip(names, outputs)))
        atomic_write(path, buf.getvalue())
        return [path]
    stem = path[:-4] if path.endswith(".npy") else path
    paths = [f"{stem}.npy"] if len(outputs) == 1 else [f"{stem}_{i}.npy" for i in range(len(outputs))]
    for p, out in zip(paths, outputs):
        buf = _io.BytesIO()
        np.save(buf, np.asarray(out))
        atomic_write(p, buf.getvalue())
    return paths
