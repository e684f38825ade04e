"""Under several processes, each one feeds its own share of the global batch.

This is what a Paddle script already does under paddle.distributed.launch: paddle.io.DistributedBatchSampler
(and paddle.Model.fit, which uses it) gives rank r the r-th block of each global batch, so the global
batch is the processes' batches one after another in rank order. The step gathers those shares (one
all-gather of the inputs per call, byte for byte, so int64 ids stay int64), trains on the whole, and
hands each process back its own rows of the per-example outputs. The loss is the global batch's,
the same on every process (Paddle's DataParallel reports each rank's own).

A default Strategy (one device) under several processes means data parallelism over all devices
of all processes, as Paddle's DataParallel does; otherwise every process would train alone."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax
import numpy as np

from ..errors import FeedError


def joined() -> bool:
    return jax.process_count() > 1


def strategy_for_group(strategy):
    """A one-device Strategy becomes data parallel over every device of the group."""
    if not joined() or strategy.devices != 1:
        return strategy
    return dataclasses.replace(strategy, replicas=jax.device_count())


def global_batches(stacked: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """name -> [K, share, ...] of this process -> [K, processes x share, ...], rank r's rows r-th."""
    from jax.experimental import multihost_utils

    _check_equal_shares(stacked)
    out = {}
    for name, x in stacked.items():
        x = np.ascontiguousarray(x)
        k, share = x.shape[:2]
        raw = x.view(np.uint8).reshape(k, share, -1)
        every = np.asarray(multihost_utils.process_allgather(raw, tiled=False))  # [P, K, share, bytes]
        whole = np.ascontiguousarray(every.transpose(1, 0, 2, 3)).reshape(k, -1, raw.shape[2])
        out[name] = whole.view(x.dtype).reshape((k, -1) + x.shape[2:])
    return out


def _check_equal_shares(stacked: Mapping[str, np.ndarray]) -> None:
    from jax.experimental import multihost_utils

    shapes = np.array([[*x.shape[:2], int(np.prod(x.shape[2:])), x.dtype.itemsize] for x in stacked.values()], np.int32)
    every = np.asarray(multihost_utils.process_allgather(shapes, tiled=False))  # [P, inputs, 4]
    for i, name in enumerate(stacked):
        seen = {tuple(every[p, i]) for p in range(every.shape[0])}
        if len(seen) > 1:
            rows = ", ".join(
                f"process {p}: {int(every[p, i, 1])} rows x {int(every[p, i, 2])} values of {int(every[p, i, 3])} bytes"
                for p in range(every.shape[0])
            )
            raise FeedError(
                f"Input {name!r}: every process must feed an equal share of the global batch "
                f"({rows}). Use paddle.io.DistributedBatchSampler (it pads the data so that every "
                "rank gets as many samples), or drop_last=True."
            )


def own_rows(outputs: list, share: int) -> list:
    """Each per-example output ([processes x share, ...]) cut back to this process's rows."""
    r, n = jax.process_index(), jax.process_count()
    return [o[r * share : (r + 1) * share] if getattr(o, "ndim", 0) and o.shape[0] == n * share else o for o in outputs]
