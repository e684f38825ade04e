"""The public face for inference: compile(), check(), load_inference_model().

This is an edge module: it may import paddle, to accept paddle.Tensors and give them back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import paddle

from .. import capture, x64
from ..errors import UnsupportedOpsError
from ..graph import Graph
from ..lowering.checking import lowering_problems
from ..lowering.lower import CoverageReport, check_graph
from ..runtime.compiled import CompiledModel
from ..strategy import Strategy


@x64.methods
class XlaModel:
    """A Paddle model compiled with XLA. Call it like the Layer: NumPy in, NumPy out;
    paddle.Tensor in, paddle.Tensor out."""

    def __init__(self, captured: capture.Captured, seed: int = 0, strategy: Strategy | None = None) -> None:
        self.captured = captured
        self.compiled = CompiledModel(captured.graph, captured.weights, seed=seed, strategy=strategy)

    @property
    def graph(self) -> Graph:
        return self.captured.graph

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat = [v for a in (*args, *kwargs.values()) for v in (a.values() if isinstance(a, dict) else [a])]
        as_paddle = any(isinstance(a, paddle.Tensor) for a in flat)
        arrays = [_to_numpy(a) for a in args]
        named = {k: _to_numpy(v) for k, v in kwargs.items()}
        outs: list[Any] = [np.asarray(o) for o in self.compiled.run(*arrays, **named)]
        if as_paddle:
            outs = [paddle.to_tensor(o) for o in outs]
        return outs[0] if len(outs) == 1 else outs

    def __repr__(self) -> str:
        return f"XlaModel({self.graph.summary()})"


def _to_numpy(x: Any) -> Any:
    if isinstance(x, paddle.Tensor):
        return x.numpy()
    if isinstance(x, dict):
        return {k: _to_numpy(v) for k, v in x.items()}
    return x


def _capture(
    model: paddle.nn.Layer | paddle.static.Program | str, input_spec: Sequence | None, training: bool | None = None
) -> capture.Captured:
    if isinstance(model, str):
        return capture.from_inference_model(model)
    if isinstance(model, paddle.nn.Layer):
        return capture.from_layer(model, input_spec, training=training)
    if type(model).__name__ == "Program":
        return capture.from_program(model)
    raise TypeError(
        f"Cannot compile a {type(model).__name__}: give a paddle.nn.Layer with input_spec, "
        "a static Program, or the path prefix of a saved inference model."
    )


def check(
    model: paddle.nn.Layer | paddle.static.Program | str,
    input_spec: Sequence | None = None,
    training: bool | None = None,
) -> CoverageReport:
    """Coverage report without compiling: the ops found, every unsupported one, and every op whose lowering
    fails on this program (found by an abstract evaluation), each with its layer and source line. A
    model it passes compiles."""
    graph = _capture(model, input_spec, training).graph
    report = check_graph(graph)
    report.problems.extend(lowering_problems(graph))
    return report


def compile(
    model: paddle.nn.Layer | paddle.static.Program | str,
    input_spec: Sequence | None = None,
    *,
    seed: int = 0,
    strategy: Strategy | None = None,
) -> XlaModel:
    """Capture `model` (an nn.Layer in its current mode, a static Program, or a saved inference model's
    path prefix) and compile it with XLA. Raises UnsupportedOpsError listing every missing op at once."""
    captured = _capture(model, input_spec)
    report = check_graph(captured.graph)
    if not report.ok:
        raise UnsupportedOpsError(report)
    return XlaModel(captured, seed=seed, strategy=strategy)


def load_inference_model(path_prefix: str, *, seed: int = 0) -> XlaModel:
    """A model saved by paddle.jit.save (path_prefix.json/.pdmodel + .pdiparams), without its Python class."""
    return compile(path_prefix, seed=seed)
