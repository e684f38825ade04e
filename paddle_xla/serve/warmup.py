"""Warm-up: every shape a request can be padded to is compiled (or read from the persistent compile
cache) in the model's worker thread before the model reports ready, so no request waits for a compile."""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from ..errors import CheckFailedError
from .layout import warmup_shapes
from .repository import ServedModel
from .settings import Settings


def warm_up(model: ServedModel, settings: Settings, log: Callable[[str], None], stopping: Callable[[], bool]) -> None:
    layout = model.layout
    shapes = warmup_shapes(layout, settings.preferred_batch_sizes, settings.seq_buckets)
    if not shapes:
        free = sorted(set(layout.free_symbols()) - {layout.batch, *layout.buckets})
        log(f"{model.name}: nothing to warm up: free dimension(s) {free} take any size, so each new size "
            "compiles when first seen (--seq-buckets pads them to sizes compiled at start-up)")
    for i, shape in enumerate(shapes, 1):
        if layout.batch and model.layout.batch is None:
            return   # NOTE: found unbatched by the first call; its other shapes will never be used
        if stopping():
            return   # NOTE: SIGTERM during warm-up: stop now, not after compiling every shape
        start = time.perf_counter()
        _warm_one(model, shape, log)
        log(f"{model.name}: compiled {_describe(shape)} ({i}/{len(shapes)}, {time.perf_counter() - start:.1f} s)")


def _warm_one(model: ServedModel, shapes: dict[str, tuple], log: Callable[[str], None]) -> None:
    feeds = {name: np.zeros(shape, model.inputs[name].dtype) for name, shape in shapes.items()}
    try:
        outputs = model.artifact.run(**feeds)
    except CheckFailedError:
        return   # NOTE: zeros fail the model's own assert; the executable is compiled all the same
    rows = len(next(iter(feeds.values()))) if model.layout.batch else None
    if rows is not None and any(o.shape[:1] != (rows,) for o in outputs):
        # NOTE: only a re-lowered artifact gets here (a symbolic export's output shapes are known)
        model.layout = dataclasses.replace(model.layout, batch=None, buckets=())
        log(f"{model.name}: served unbatched: for {rows} rows its outputs have shapes "
            f"{[list(o.shape) for o in outputs]}, so its rows are not independent requests")


def _describe(shapes: dict[str, tuple]) -> str:
    return ", ".join(f"{name}{list(shape)}" for name, shape in shapes.items())
