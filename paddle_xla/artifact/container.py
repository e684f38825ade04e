"""The .pxa container: one zip file of members, each with its sha256 in the manifest, and the versions
that say who can read it. Both artifact kinds (inference: writer.py, reader.py; a train step:
train_writer.py, train_reader.py) are written (`write`) and read (`read`) through this module.

  manifest.json            format version, versions, kind, feeds/fetches, sha256 of every other member,
                           and `lowering`: the lowering version and each platform's LoweringPolicy
  graph.json               the Graph (Graph.to_json), to re-lower on platforms not exported for
  weights.safetensors      every persistable, by parameter name
  strategy.json            the Strategy it was exported with (an inference model's: its precision)
  exported/<platform>.bin  jax.export serialized StableHLO of the exported function

Paddle-free."""

from __future__ import annotations

import datetime
import hashlib
import io as _io
import json
import zipfile
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from ..errors import ModelLoadError
from ..files import atomic_write
from ..graph import Graph, Tensor
from ..lowering.interpreter import check_message
from ..lowering.lower import checked_ops
from ..lowering.policy import LOWERING_VERSION, PLATFORMS, LoweringPolicy, live_platform  # noqa: F401  (PLATFORMS: export's)

# NOTE: 2: an inference executable reads the weights its manifest lists (exported.<p>.hwio_filters,
# .half_weights) as HWIO or in half (held.py). Version 1 had no half_weights, and hwio_filters only in its
# last release: an older reader would feed the filters as OIHW (silently wrong where the shapes agree), so
# it must refuse these. 3: a generator may prefill long prompts in chunks (geometry.prefill_chunk, the
# extend programs) and holds prefills only up to that chunk: an older reader would look for prefills up to
# max_length and call the artifact damaged. 4: a CPU inference executable reads the float32 matmul weights
# its manifest lists (exported.<p>.nk_weights) as [N, K]; an older reader would feed them as [K, N]
# (silently wrong for a square weight). 5: a generator may leave its matrices out (synthetic_weights) for
# the loader to draw; an older reader would load it and fail at the first call on a missing weight.
FORMAT_VERSION = 5
MANIFEST, GRAPH, WEIGHTS, STRATEGY = "manifest.json", "graph.json", "weights.safetensors", "strategy.json"
current_platform = live_platform


def exported_member(platform: str) -> str:
    return f"exported/{platform}.bin"


def lowering_record(policies: Mapping[str, LoweringPolicy], precision: str) -> dict:
    """The manifest's account of how the program was lowered: for each exported platform, and the
    precision a re-lowering must keep."""
    return {
        "version": LOWERING_VERSION,
        "precision": precision,
        "policies": {p: pol.to_dict() for p, pol in policies.items()},
    }


def recorded_precision(manifest: Mapping) -> str:
    """The precision an artifact computes in (fp32 for one written before precision was recorded)."""
    return (manifest.get("lowering") or {}).get("precision", "fp32")


def lowering_moved(manifest: Mapping) -> str:
    """'' when this paddle_xla lowers as the exporter did, else a sentence saying the numbers may move."""
    version = (manifest.get("lowering") or {}).get("version", 1)
    if version == LOWERING_VERSION:
        return ""
    return (
        f"; it was lowered with lowering version {version} (paddle_xla {manifest.get('paddle_xla_version', '?')}), "
        f"this paddle_xla lowers with version {LOWERING_VERSION}, so its numbers may differ slightly "
        "from the exporter's"
    )


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
    manifest = dict(
        manifest,
        format_version=FORMAT_VERSION,
        paddle_xla_version=paddle_xla_version(),
        jax_version=jax.__version__,
        created_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        members={name: {"sha256": sha256(data), "size": len(data)} for name, data in members.items()},
    )
    buf = _io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(MANIFEST, json.dumps(manifest, indent=1), compress_type=zipfile.ZIP_DEFLATED)
        for name, data in members.items():
            # NOTE: weights and executables are stored, not compressed: float data hardly shrinks, and
            # a stored member could later be memory-mapped straight out of the file.
            kind = zipfile.ZIP_DEFLATED if name.endswith(".json") else zipfile.ZIP_STORED
            z.writestr(name, data, compress_type=kind)
    return buf.getvalue(), manifest


def write(
    path: str,
    kind: str,
    graph: Graph,
    weights: Mapping[str, np.ndarray],
    strategy_json: bytes,
    exported: Mapping[str, bytes],
    entries: Mapping[str, dict],
    policies: Mapping[str, LoweringPolicy],
    precision: str,
    synthetic: Mapping | None = None,
    members: Mapping[str, bytes] | None = None,
    **fields,
) -> dict:
    """Write an artifact of either kind, atomically, and return its manifest: the members every
    artifact has (the Graph, the weights, the Strategy, one executable per exported platform) plus
    `members`; the manifest fields every artifact has plus `fields`. `entries` is the manifest's
    per-platform record ("exported"), each with its member's name added."""
    every = {
        GRAPH: graph.to_json().encode(),
        WEIGHTS: weights_bytes(weights),
        STRATEGY: strategy_json,
        **(members or {}),
    }
    every.update({exported_member(p): data for p, data in exported.items()})
    manifest = {
        "kind": kind,
        "feeds": [tensor_spec(t) for t in graph.feeds],
        "fetches": [tensor_spec(t) for t in graph.fetches],
        "exported": {p: {"member": exported_member(p), **entry} for p, entry in entries.items()},
        "lowering": lowering_record(policies, precision),
        "checks": [check_message(op) for op in checked_ops(graph)],
        **fields,
        **({"synthetic_weights": synthetic} if synthetic else {}),
    }
    data, manifest = pack(every, manifest)
    atomic_write(path, data)
    return manifest


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- reading ----------------------------------------------------------------------------------
def read(path: str) -> tuple[dict, dict[str, bytes]]:
    """(manifest, members) of the .pxa at `path`, each member checked against its sha256."""
    try:
        with zipfile.ZipFile(path) as z:
            manifest = _manifest(path, z)
            return manifest, {name: _member(path, z, name, info) for name, info in manifest["members"].items()}
    except FileNotFoundError:
        raise ModelLoadError(f"No artifact at {path!r}. Write one with px.export(model, {path!r}).") from None
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise ModelLoadError(
            f"{path!r} is truncated or is not a paddle_xla artifact ({e}). Copy it again, or export it again."
        ) from None


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
            f"format version {FORMAT_VERSION} and older. Upgrade paddle_xla: pip install -U paddle_xla."
        )
    missing = [k for k in ("members", "feeds", "fetches") if k not in manifest]
    if missing or WEIGHTS not in manifest["members"]:
        raise ModelLoadError(f"The {MANIFEST} of {path!r} lacks {missing or [WEIGHTS]}; export it again.")
    return manifest


def _member(path: str, z: zipfile.ZipFile, name: str, info: Mapping) -> bytes:
    try:
        data = z.read(name)
    except KeyError:
        raise ModelLoadError(
            f"{path!r} lacks member {name!r}, which its manifest lists; the file was altered. Export it again."
        ) from None
    except zipfile.BadZipFile as e:  # NOTE: zip's own CRC check fails before ours can
        raise ModelLoadError(f"Member {name!r} of {path!r} is corrupt ({e}); export it again.") from None
    if sha256(data) != info.get("sha256"):
        raise ModelLoadError(
            f"Member {name!r} of {path!r} does not match its sha256 in the manifest: "
            "it is truncated or was tampered with. Export it again."
        )
    return data


def weights_of(path: str, data: bytes) -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    try:
        return dict(load(data))
    except Exception as e:  # safetensors raises its own error types for bad headers
        raise ModelLoadError(f"The weights in {path!r} are corrupt ({e}); export it again.") from None


def stored_graph(path: str, members: Mapping[str, bytes], member: str, what: str) -> Graph:
    """The Graph in `member` (`what` names it in the errors), or a ModelLoadError saying to export again."""
    if member not in members:
        raise ModelLoadError(f"{path!r} lacks {what} ({member}); export it again.")
    try:
        return Graph.from_json(members[member].decode())
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"{what} in {path!r} is corrupt ({e}); export it again.") from None


def graph_of(path: str, members: Mapping[str, bytes]) -> Graph | None:
    if GRAPH not in members:
        return None
    try:
        return Graph.from_json(members[GRAPH].decode())
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"The Graph in {path!r} is corrupt ({e}); export it again.") from None


class ManifestViews:
    """What an inference Artifact and a TrainArtifact both read off their manifest (self.manifest) and
    feed specs (self.feeds_spec, tensors_of(manifest["feeds"]))."""

    manifest: Mapping[str, Any]
    feeds_spec: tuple[Tensor, ...]

    @property
    def input_names(self) -> list[str]:
        return [f.name for f in self.feeds_spec]

    @property
    def exported_platforms(self) -> list[str]:
        return sorted(self.manifest.get("exported", {}))


def tensors_of(specs) -> tuple[Tensor, ...]:
    return tuple(Tensor(s["name"], -1, tuple(s["shape"]), s["dtype"]) for s in specs)


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
                return (
                    f"input shapes {shapes_of(feeds)} do not fit the exported shapes "
                    f"{ {k: _dims(v) for k, v in exported_shapes.items()} }"
                )
    return None


def _dims(shape) -> list:
    return [d if isinstance(d, (int, np.integer)) else str(d) for d in shape]


def shapes_of(feeds: Mapping[str, Any]) -> dict[str, list]:
    return {k: list(np.shape(v)) for k, v in feeds.items()}
