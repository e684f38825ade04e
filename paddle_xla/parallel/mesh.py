"""The device mesh: axes ("replica", "stage", "sequence", "tensor"), as Graphcore's replicas x pipelined
IPUs, each stage's layers split over `tensor` devices, and its sequence over `sequence` devices.

Device (r, s, q, t) holds part t of sequence part q of pipeline stage s of replica r. The tensor axis is
innermost, then the sequence (whose attention gathers keys and values), then the stage: the devices that
split one layer (the chattiest collectives) sit next to each other in jax.devices() order, then a
replica's stages, so on a multi-host run both stay within a host where they can. The axes are Auto (GSPMD
places the tensor axis's collectives; jax.make_mesh's default, Explicit, would refuse sharding constraints
inside a shard_map)."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ..strategy import Strategy

AXES = ("replica", "stage", "sequence", "tensor")


def make_mesh(strategy: Strategy, devices=None) -> Mesh:
    if devices is None:
        strategy.check_devices()  # NOTE: a Strategy planned for another machine may ask for more
    devices = list(devices if devices is not None else jax.devices())[: strategy.devices]
    grid = np.array(devices).reshape(strategy.replicas, strategy.stages, strategy.sequence, strategy.tensor)
    return Mesh(grid, AXES, axis_types=(AxisType.Auto,) * len(AXES))


def sharding(mesh: Mesh, *spec) -> NamedSharding:
    return NamedSharding(mesh, P(*spec))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def put(x, where: NamedSharding):
    """A host value as a global array with this sharding. Every process passes the same value; each
    places only its own devices' pieces (so it works across processes, too)."""
    if isinstance(x, dict):
        return {k: put(v, where) for k, v in x.items()}
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, where, lambda index: x[index])


def to_host(x) -> np.ndarray:
    """A global array as one NumPy value in every process (gathered across processes when needed)."""
    if getattr(x, "is_fully_addressable", True) or x.is_fully_replicated:
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
