"""Write a compiled model as a Paddle-free artifact (`*.pxa`); paddle_xla.artifact.load runs it.

Paddle-free itself: it reads the Graph and weights a CompiledModel already holds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from .. import x64
from ..errors import ExportError
from ..graph import Graph
from ..lowering.lower import lower
from ..lowering.policy import LoweringPolicy
from ..runtime.compiled import CompiledModel
from ..runtime.held import HeldWeights
from ..runtime.xla_options import has_convolutions
from ..strategy import Strategy
from . import container as fmt
from . import synthetic_weights as synthetic_lib
from .generator_writer import export_generator, is_generator
from .jax_export import avals, check_platforms, export_all


@x64.enabled
def export(
    model: Any,
    path: str,
    platforms: Sequence[str] = ("cpu",),
    example_inputs: Sequence[Any] | Mapping[str, Any] | None = None,
    synthetic_weights: Mapping | None = None,
    tokenizer: Any = None,
    chat_template: str | None = None,
) -> dict:
    """Write `model` (an XlaModel, a CompiledModel, or a train step) to the single file `path`, atomically.

    For each platform in `platforms` ('cpu', 'cuda', 'rocm', 'tpu'; none need be present here) the
    artifact holds jax.export's serialized StableHLO. The None dimensions of the InputSpecs stay
    symbolic when the program allows it; otherwise the executables are for the shapes of
    `example_inputs` (a list in forward()'s order, or a dict by input name). A train step
    (px.train_step) is written with its optimizer, LR schedule and state (see train_writer.py).
    `synthetic_weights={"std": 0.02, "seed": 0}` leaves the weights of 2 or more dimensions out; the
    loader draws them as normal(0, std) (see synthetic_weights.py). Each platform's executable is
    lowered with the policy tuned for that platform, in the model's precision; the manifest records
    them (`lowering`). A px.Generator is written with its prefill and decode programs, its generation
    config, `tokenizer` and its chat template (`chat_template`, default the tokenizer's own; see
    generator_writer.py). Returns the manifest."""
    if is_generator(model):
        if example_inputs is not None:
            raise ExportError("a generator exports its own fixed shapes: drop example_inputs")
        return export_generator(model, path, platforms, tokenizer, chat_template, synthetic_weights)
    if tokenizer is not None or chat_template is not None:
        raise ExportError("tokenizer= and chat_template= go with a px.Generator; this model is not one")
    if _is_train_step(model):
        from .train_writer import export_train

        return export_train(model, path, platforms, example_inputs, synthetic_weights)
    compiled = _compiled_model(model)
    platforms = check_platforms(platforms)
    graph = compiled.graph
    key_data = np.asarray(jax.random.key_data(compiled.key))
    # NOTE: the weights as Paddle laid them out: the compiled model may hold some in another layout or
    # precision for its own executable (runtime.CompiledModel), while the artifact lowers the Graph as is.
    weights = {k: np.asarray(compiled.source_weights[k]) for k in {**compiled.params, **compiled.buffers}}
    precision = compiled.policy.precision
    # NOTE: an inference artifact holds its weights like CompiledModel (held.py): on CPU the conv filters
    # as HWIO, under bf16/fp16 the white-list weights in half, prepared once when loaded (the manifest lists
    # them), so the same kernel forms apply. ResNet-50 b8 from a .pxa, 2 cores: fp32 237.7 -> 228.4 ms
    # (HWIO); bf16 185 -> 147 (HWIO), then 143.4 -> 130.1 (half; px.compile in the same run: 130.3).
    policies = {p: LoweringPolicy.tuned(p, precision, inference=True) for p in platforms}
    held = {p: HeldWeights.for_graph(graph, policies[p]) for p in platforms}

    def args(p: str) -> tuple[dict[str, Any], dict[str, Any]]:
        laid_out = held[p].all_prepared(weights)
        return (avals({k: laid_out[k] for k in compiled.params}), avals({k: laid_out[k] for k in compiled.buffers}))

    exported, shapes = export_all(
        lambda p: jax.jit(inference_fn(graph, policies[p])), graph, args, (key_data,), platforms, example_inputs
    )
    weights, synthetic = synthetic_lib.leave_out(weights, synthetic_weights)
    return fmt.write(
        path,
        "inference",
        graph,
        weights,
        json.dumps(Strategy(precision=precision).to_dict()).encode(),
        exported,
        {p: {**shapes, **held[p].to_manifest()} for p in platforms},
        policies,
        precision,
        synthetic,
        key_data=key_data.tolist(),
        # NOTE: so that a loader without the Graph still compiles with the same options
        convolutions=has_convolutions(graph),
    )


def _is_train_step(model: object) -> bool:
    # NOTE: duck-typed (training.TrainStep imports paddle; a TrainArtifact does not).
    return all(hasattr(model, a) for a in ("graph", "state", "config", "schedule"))


def _compiled_model(model: object) -> CompiledModel:
    # NOTE: duck-typed on XlaModel.compiled, so this module never imports api (and so paddle).
    compiled = getattr(model, "compiled", model)
    if not isinstance(compiled, CompiledModel):
        raise ExportError(
            f"export() takes a paddle_xla.compile() result, a CompiledModel or a "
            f"paddle_xla.train_step(), not a {type(model).__name__}."
        )
    return compiled


def inference_fn(graph: Graph, policy: LoweringPolicy) -> Callable[..., Any]:
    """f(params, buffers, feeds, key_data) -> fetches, then one flag per top-level assert (manifest
    "checks"): the function an artifact serializes."""
    fn = lower(graph, policy, checks=True)

    def f(
        params: Mapping[str, jax.Array],
        buffers: Mapping[str, jax.Array],
        feeds: Mapping[str, jax.Array],
        key_data: jax.Array,
    ) -> Any:
        # NOTE: raw key data, not a key: a typed key array does not cross the serialization boundary.
        fetches, _ = fn(params, buffers, feeds, jax.random.wrap_key_data(key_data))
        return fetches

    return f
