"""Warm-up: every shape a request can be padded to is compiled (or read from the persistent compile
cache) in the model's worker thread before the model reports ready, so no request waits for a compile.
With `time_calls`, each batched shape is also timed (the best of TIMED_CALLS calls after the compiling
one, and their spread as the noise), so that the batcher can run a batch as its cheapest calls (plan.py)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..errors import CheckFailedError
from .layout import warmup_shapes
from .padding import group_of
from .repository import ServedModel
from .settings import Settings

TIMED_CALLS = 3  # NOTE: after the compiling call; their spread is the noise a batch plan must beat


class Timed(NamedTuple):
    best: float  # the fastest of the timed calls, seconds
    spread: float  # the slowest minus the fastest: how far one timing can be off


Timings = dict[tuple, dict[int, Timed]]  # {request group (padding.group_of): {batch size: Timed}}


def warm_up(
    model: ServedModel,
    settings: Settings,
    log: Callable[[str], None],
    stopping: Callable[[], bool],
    time_calls: bool = False,
) -> Timings:
    layout = model.layout
    timings: Timings = {}
    shapes = warmup_shapes(layout, settings.preferred_batch_sizes, settings.seq_buckets)
    if not shapes:
        free = sorted(set(layout.free_symbols()) - {layout.batch, *layout.buckets})
        log(
            f"{model.name}: nothing to warm up: free dimension(s) {free} take any size, so each new size "
            "compiles when first seen (--seq-buckets pads them to sizes compiled at start-up)"
        )
    for i, shape in enumerate(shapes, 1):
        if layout.batch and model.layout.batch is None:
            return {}  # NOTE: found unbatched by the first call; its other shapes will never be used
        if stopping():
            return timings  # NOTE: SIGTERM during warm-up: stop now, not after compiling every shape
        start = time.perf_counter()
        feeds = {name: np.zeros(s, model.inputs[name].dtype) for name, s in shape.items()}
        ran = _warm_one(model, feeds, log)
        log(f"{model.name}: compiled {_describe(shape)} ({i}/{len(shapes)}, {time.perf_counter() - start:.1f} s)")
        # NOTE: with one batch size there is nothing to choose between
        if ran and time_calls and model.layout.batch and len(settings.preferred_batch_sizes) > 1:
            timings.setdefault(group_of(feeds), {})[len(next(iter(feeds.values())))] = _best_call(model, feeds)
    return timings


def _best_call(model: ServedModel, feeds: dict[str, np.ndarray]) -> Timed:
    times = []
    for _ in range(TIMED_CALLS):
        start = time.perf_counter()
        [np.asarray(o) for o in model.artifact.run(**feeds)]
        times.append(time.perf_counter() - start)
    return Timed(min(times), max(times) - min(times))


def _warm_one(model: ServedModel, feeds: dict[str, np.ndarray], log: Callable[[str], None]) -> bool:
    """Compile for these feeds; whether the call ran (zeros may fail the model's own assert)."""
    try:
        outputs = model.artifact.run(**feeds)
    except CheckFailedError:
        return False  # NOTE: the executable is compiled all the same
    rows = len(next(iter(feeds.values()))) if model.layout.batch else None
    if rows is not None and any(o.shape[:1] != (rows,) for o in outputs):
        # NOTE: only a re-lowered artifact gets here (a symbolic export's output shapes are known)
        model.layout = dataclasses.replace(model.layout, batch=None, buckets=())
        log(
            f"{model.name}: served unbatched: for {rows} rows its outputs have shapes "
            f"{[list(o.shape) for o in outputs]}, so its rows are not independent requests"
        )
    return True


def _describe(shapes: dict[str, tuple]) -> str:
    return ", ".join(f"{name}{list(shape)}" for name, shape in shapes.items())
