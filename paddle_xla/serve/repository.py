"""The model repository: every *.pxa directly in one folder is a model, named by its file stem, and so is
every PaddleFormers checkpoint folder there (or the folder itself, when it is one), named by its folder
(api/checkpoint_folder.py builds its generator artifact, or finds it in the cache).

Names are looked up in the dict built here, never joined into a path, so a request cannot reach a
file the scan did not list. Artifacts load through paddle_xla.artifact.load, which checks every
member against its sha256 and reads weights with safetensors (nothing is unpickled)."""

from __future__ import annotations

import dataclasses
import os
import shlex
import tempfile
from collections.abc import Callable

import numpy as np

from ..api import checkpoint_folder
from ..api.checkpoint_folder import checkpoints_in, is_checkpoint
from ..artifact import reader as pxa
from ..errors import ExportError, ModelLoadError
from .datatypes import kserve_name, numpy_dtype
from .layout import BatchLayout, layout_of

VERSION = "1"  # NOTE: one file is one version; KServe clients still ask for versions by name


@dataclasses.dataclass(frozen=True)
class TensorMeta:
    name: str
    datatype: str  # KServe's: FP32, INT64, ...
    shape: tuple[int, ...]  # -1 for a free dimension
    dtype: np.dtype

    def describe(self) -> str:
        return f"{self.name!r} ({self.datatype}, shape {list(self.shape)})"

    def metadata(self) -> dict:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclasses.dataclass
class ServedModel:
    name: str
    path: str
    artifact: pxa.Artifact
    layout: BatchLayout
    inputs: dict[str, TensorMeta]
    outputs: dict[str, TensorMeta]

    def metadata(self) -> dict:
        return {
            "name": self.name,
            "versions": [VERSION],
            "platform": "paddle_xla",
            "inputs": [t.metadata() for t in self.inputs.values()],
            "outputs": [t.metadata() for t in self.outputs.values()],
        }


def scan(
    folder: str,
    batching: bool,
    buckets: bool,
    progress: Callable[[str], None] = print,
    generators: dict | None = None,
    checkpoint_options=None,
) -> dict[str, ServedModel]:
    """Load every *.pxa in `folder`. Any artifact that cannot be served stops the start-up, naming
    the file (Triton's default, --exit-on-error): a half-served repository is easy to miss.
    Generator artifacts (px.export of a px.Generator) go into `generators` (name -> artifact), served by
    the language-model routes; without that dict they are refused. So do checkpoint folders' artifacts, built
    with `checkpoint_options` (api/checkpoint_folder.BuildOptions)."""
    if os.path.isfile(folder):
        raise ModelLoadError(
            f"{folder!r} is a file; serve takes the folder that holds it (every *.pxa there is "
            f"a model): paddle-xla serve {shlex.quote(os.path.dirname(folder) or '.')}"
        )
    if not os.path.isdir(folder):
        raise ModelLoadError(
            f"Model repository {folder!r} does not exist. Give the folder that holds your *.pxa "
            "files (paddle-xla serve . for the current one)."
        )
    checkpoints = checkpoints_in(folder)
    files = sorted(f for f in os.listdir(folder) if f.endswith(".pxa") and os.path.isfile(os.path.join(folder, f)))
    if checkpoints and is_checkpoint(folder):
        files = []  # NOTE: the folder is one model
    if not files and not checkpoints:
        raise ModelLoadError(
            f"No *.pxa files or checkpoint folders in {folder!r}. Write one with px.export(model, "
            f"'{os.path.join(folder, 'name.pxa')}') or paddle-xla export MODULE:FACTORY "
            f"--input-spec ... -o {os.path.join(folder, 'name.pxa')}, or save a PaddleFormers model there "
            "with save_pretrained."
        )
    if checkpoints:
        _checkpoints(checkpoints, files, generators, checkpoint_options, progress)
    models = {}
    for file in files:
        progress(f"loading {file}")
        path = os.path.join(folder, file)
        artifact = pxa.load(path)
        if artifact.manifest.get("kind") == "generator":
            if generators is None:
                raise ModelLoadError(f"{path!r} is a generator artifact; this server has no language-model routes")
            generators[file[: -len(".pxa")]] = artifact
            continue
        model = load_model(path, batching, buckets, artifact)
        models[model.name] = model
        for note in model.layout.notes:
            progress(f"{model.name}: {note}")
    return models


def _checkpoints(checkpoints: dict, files: list, generators: dict | None, options, progress) -> None:
    """Each checkpoint folder's generator artifact, built (or found in the cache) and loaded into `generators`."""
    if generators is None:
        raise ModelLoadError(
            f"{sorted(checkpoints.values())} are checkpoint folders; this server has no language-model routes"
        )
    clash = sorted(set(checkpoints) & {f[: -len(".pxa")] for f in files})
    if clash:
        raise ModelLoadError(
            f"{clash} name both a .pxa file and a checkpoint folder; rename one of them (a model's name is its file "
            "stem or its folder's name)"
        )
    # NOTE: used only with the cache off; an artifact is read whole when loaded, so its file can go then
    with tempfile.TemporaryDirectory(prefix="paddle-xla-checkpoints-") as scratch:
        for name, path in checkpoints.items():
            try:
                built = checkpoint_folder.built(path, options or checkpoint_folder.BuildOptions(), progress, scratch)
            except ExportError as e:
                raise ModelLoadError(f"Cannot serve checkpoint folder {path!r}: {e}") from None
            generators[name] = pxa.load(built)


def load_model(path: str, batching: bool, buckets: bool, artifact=None) -> ServedModel:
    name = os.path.basename(path)[: -len(".pxa")]
    artifact = artifact if artifact is not None else pxa.load(path)
    if artifact.manifest.get("kind") == "train":
        raise ModelLoadError(
            f"{path!r} is a train-step artifact; serve inference artifacts "
            "(px.export of a compiled model), or move it out of the folder."
        )
    try:
        inputs = {t.name: _meta(t) for t in artifact.feeds_spec}
        outputs = {t.name: _meta(t) for t in artifact.fetches_spec}
    except ModelLoadError as e:
        raise ModelLoadError(f"Cannot serve {path!r}: {e}") from None
    return ServedModel(name, path, artifact, layout_of(artifact, batching, buckets), inputs, outputs)


def _meta(tensor) -> TensorMeta:
    return TensorMeta(tensor.name, kserve_name(tensor.dtype), tuple(tensor.shape), numpy_dtype(tensor.dtype))
