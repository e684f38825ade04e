"""The public face of the planner: px.plan(net, input_spec, label_spec, optimizer, ...) -> Plan.

An edge module (imports paddle): it captures the model as train_step would, without its weights'
values, so a model built under paddle.LazyGuard() too big for this machine can be planned."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import paddle

from .. import capture
from ..capture.wrap import net_with_loss
from ..errors import StrategyError
from ..graph import Graph
from ..interop import paddle_optimizer as optim_interop
from ..planner import costs as costs_lib
from ..planner import search
from ..planner.profiles import profile


def plan(
    net: paddle.nn.Layer,
    input_spec: Sequence,
    label_spec: Sequence = (),
    optimizer: paddle.optimizer.Optimizer | None = None,
    *,
    loss_fn: Callable[..., Any] | None = None,
    global_batch: int,
    devices: int,
    device: str = "cpu",
    tensor_plan: Any = None,
    precisions: Sequence[str] | None = None,
) -> search.Plan:
    """Every layout of `devices` x `device` for a global batch of `global_batch`, predicted and ranked;
    `.table()` prints them, `.best` is the fastest that fits, as a Strategy. The InputSpecs' dimensions
    but the batch must be concrete. `optimizer` defaults to SGD (no optimizer state)."""
    if global_batch < 1 or devices < 1:
        raise StrategyError(f"plan() needs global_batch >= 1 and devices >= 1, got {global_batch} and {devices}.")
    prof = profile(device, devices)
    specs = list(input_spec) + list(label_spec)
    wrapper = net_with_loss(net, loss_fn, [s.name for s in input_spec], [s.name for s in label_spec])
    captured = capture.from_layer(wrapper, specs, training=True, weights=False)
    graph = captured.graph.with_frozen(captured.graph.unused_by(0))
    opt = optimizer if optimizer is not None else paddle.optimizer.SGD(0.0, parameters=net.parameters())
    config = optim_interop.optimizer_config(opt).with_frozen(graph.unused_by(0))
    costs = costs_lib.model_costs(graph, config)
    stage_bytes = _stage_bytes(graph, captured.state_keys, costs)
    return search.plan(
        costs,
        captured.state_keys,
        prof,
        devices,
        global_batch,
        tensor_plan,
        tuple(precisions or prof.precisions),
        stage_bytes,
    )


def _stage_bytes(graph: Graph, keys: Mapping[str, str], costs: costs_lib.ModelCosts) -> Callable[[int], list[float]]:
    """S -> the weight bytes of each stage under the "auto" placement (the widest one sets the packing)."""
    from ..parallel import placement as pl
    from ..parallel import report
    from ..parallel import stages as stages_lib

    cache: dict[int, list[float]] = {}
    values = report.stand_in_values(graph)
    cost, cut_bytes = report.costs(graph, values)

    def of(stages: int) -> list[float]:
        if stages not in cache:
            own = stages_lib.ownership(graph, pl.place(graph, stages, "auto", {}, keys, cost, cut_bytes))
            shared = sum(costs.weight_bytes[n] for n in own.shared)
            cache[stages] = [sum(costs.weight_bytes[n] for n in names) + shared for names in own.trainable]
        return cache[stages]

    return of
