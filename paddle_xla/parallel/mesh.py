"""The device mesh: axes ("replica", "stage"), as Graphcore's replicas x pipelined IPUs.

Device (r, s) runs pipeline stage s of replica r. Stage neighbours of one replica sit next to each
other in jax.devices() order, so on a multi-host run a pipeline stays within a host where it can."""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ..strategy import Strategy

AXES = ("replica", "stage")


def make_mesh(strategy: Strategy, devices=None) -> Mesh:
    devices = list(devices if devices is not None else jax.devices())[: strategy.devices]
    return Mesh(np.array(devices).reshape(strategy.replicas, strategy.stages), AXES)


def sharding(mesh: Mesh, *spec) -> NamedSharding:
    return NamedSharding(mesh, P(*spec))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())
