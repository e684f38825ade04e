"""Which dimension of a model is the batch, and which may be padded to a sequence bucket.

A symbolic export (artifact manifest `exported.<platform>.shapes == "symbolic"`) names every free
dimension: d0 is shared by all inputs that have a None at position 0, and the executable's output
shapes say which outputs carry it. So the layout is read, not guessed:

  batch    the symbol every input and every output starts with, and that appears nowhere else: rows
           are then independent requests, as Triton assumes of a model with max_batch_size > 0
  buckets  the other free symbols of the inputs that each output either lacks or has as a whole
           dimension, so that padding them and slicing the outputs back gives the unpadded shapes

An artifact that re-lowers here (no symbolic executable for this platform) has no output symbols:
it may still be batched when every input and output has a free first dimension (warm-up checks the
output rows), but never bucketed."""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Sequence
from typing import Any

Dim = int | str  # a fixed size, or the name of a symbolic dimension


@dataclasses.dataclass(frozen=True)
class BatchLayout:
    inputs: dict[str, tuple[Dim, ...]]
    outputs: dict[str, tuple[Dim, ...]] | None  # None: unknown (the artifact re-lowers here)
    batch: str | None  # None: each request runs alone, as given
    buckets: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # why batching or bucketing is off, for the start-up log

    @property
    def symbolic(self) -> bool:
        return self.outputs is not None

    def free_symbols(self) -> list[str]:
        return list(dict.fromkeys(d for dims in self.inputs.values() for d in dims if isinstance(d, str)))


def layout_of(artifact, batching_wanted: bool, buckets_wanted: bool) -> BatchLayout:
    inputs, outputs = _symbols(artifact)
    batch, why_not = _batch_symbol(inputs, outputs, artifact)
    notes = [] if batch or not batching_wanted else [f"served unbatched: {why_not}"]
    buckets: tuple[str, ...] = ()
    if buckets_wanted and batch:
        free = [s for s in BatchLayout(inputs, outputs, batch).free_symbols() if s != batch]
        buckets = tuple(s for s in free if outputs is not None and _sliceable(s, outputs))
        if outputs is None and free:
            notes.append("--seq-buckets off: this artifact re-lowers here, so its output shapes are unknown")
        notes += [
            f"--seq-buckets off for dimension {s}: an output uses it other than as a whole dimension"
            for s in free
            if s not in buckets and outputs is not None
        ]
    return BatchLayout(inputs, outputs, batch, buckets, tuple(notes))


def warmup_shapes(layout: BatchLayout, batch_sizes: Sequence[int], buckets: Sequence[int]) -> list[dict[str, tuple]]:
    """Every input shape a served request can be padded to: batch sizes x buckets. [] when a free
    dimension is neither batch nor bucketed: its sizes are only known when requests come."""
    if set(layout.free_symbols()) - {layout.batch, *layout.buckets}:
        return []
    sizes = batch_sizes if layout.batch else [None]
    shapes = []
    for size, *lengths in itertools.product(sizes, *[buckets] * len(layout.buckets)):
        value: dict[str | None, Any] = {layout.batch: size, **dict(zip(layout.buckets, lengths))}
        shapes.append(
            {name: tuple(value[d] if isinstance(d, str) else d for d in dims) for name, dims in layout.inputs.items()}
        )
    return shapes


def _symbols(artifact) -> tuple[dict[str, tuple[Dim, ...]], dict[str, tuple[Dim, ...]] | None]:
    exported = artifact.manifest.get("exported", {}).get(artifact.platform, {})
    if artifact.mode == "exported" and exported.get("shapes") == "symbolic":
        inputs = {k: tuple(v) for k, v in exported["feed_shapes"].items()}
        avals = artifact.exported.out_avals[: len(artifact.fetches_spec)]  # NOTE: the rest are assert flags
        outputs = {
            f.name: tuple(d if isinstance(d, int) else str(d) for d in a.shape)
            for f, a in zip(artifact.fetches_spec, avals)
        }
        return {f.name: inputs[f.name] for f in artifact.feeds_spec}, outputs
    # NOTE: the exporter's own convention (exporting._symbolic_specs): a None at position i is d<i>.
    return {f.name: tuple(f"d{i}" if d < 0 else d for i, d in enumerate(f.shape)) for f in artifact.feeds_spec}, None


def _batch_symbol(inputs, outputs, artifact) -> tuple[str | None, str]:
    firsts = {dims[0] if dims else None for dims in inputs.values()}
    batch = firsts.pop() if len(firsts) == 1 else None
    if not isinstance(batch, str):
        return None, "its inputs do not all start with one free (None) dimension"
    if any(_mentions(d, batch) for dims in inputs.values() for d in dims[1:]):
        return None, f"its batch dimension {batch} appears again inside an input"
    if outputs is None:
        if all(f.shape and f.shape[0] == -1 for f in artifact.fetches_spec):
            return batch, ""
        return None, "an output does not start with a free dimension"
    for name, dims in outputs.items():
        if not dims or dims[0] != batch or any(_mentions(d, batch) for d in dims[1:]):
            return None, f"output {name!r} (shape {list(dims)}) does not have the batch as its first dimension only"
    return batch, ""


def _sliceable(symbol: str, outputs) -> bool:
    return all(d == symbol or not _mentions(d, symbol) for dims in outputs.values() for d in dims)


def _mentions(dim: Dim, symbol: str) -> bool:
    return isinstance(dim, str) and re.search(rf"\b{re.escape(symbol)}\b", dim) is not None
