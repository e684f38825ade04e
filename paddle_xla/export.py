"""Write a compiled model as a Paddle-free artifact (`*.pxa`); paddle_xla.artifact.load runs it.

Paddle-free itself: it reads the Graph and weights a CompiledModel already holds.
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import jax
import numpy as np

from . import artifact as fmt
from . import feeds as feeds_mod
from . import synthetic_weights as synthetic_lib
from . import x64
from .errors import ExportError  # noqa: F401  (re-exported: export() raises it)
from .graph import Graph
from .io import atomic_write
from .lower import lower
from .ops.util import dtype as jax_dtype
from .policy import LoweringPolicy
from .runtime import CompiledModel
from .strategy import Strategy


@x64.enabled
def export(model, path: str, platforms: Sequence[str] = ("cpu",), example_inputs=None,
           synthetic_weights: Mapping | None = None) -> dict:
    """Write `model` (an XlaModel, a CompiledModel, or a train step) to the single file `path`, atomically.

    For each platform in `platforms` ('cpu', 'cuda', 'rocm', 'tpu'; none need be present here) the
    artifact holds jax.export's serialized StableHLO. The None dimensions of the InputSpecs stay
    symbolic when the program allows it; otherwise the executables are for the shapes of
    `example_inputs` (a list in forward()'s order, or a dict by input name). A train step
    (px.train_step) is written with its optimizer, LR schedule and state (see train_artifact).
    `synthetic_weights={"std": 0.02, "seed": 0}` leaves the weights of 2 or more dimensions out; the
    loader draws them as normal(0, std) (see synthetic_weights.py). Each platform's executable is
    lowered with the policy tuned for that platform, in the model's precision; the manifest records
    them (`lowering`). Returns the manifest."""
    if _is_train_step(model):
        from .train_artifact import export_train
        return export_train(model, path, platforms, example_inputs, synthetic_weights)
    compiled = _compiled_model(model)
    platforms = _check_platforms(platforms)
    graph = compiled.graph
    key_data = np.asarray(jax.random.key_data(compiled.key))
    # NOTE: the weights as Paddle laid them out: the compiled model may hold some in another layout or
    # precision for its own executable (runtime.CompiledModel), while the artifact lowers the Graph as is.
    weights = {k: np.asarray(compiled.source_weights[k]) for k in {**compiled.params, **compiled.buffers}}
    args = (_avals({k: weights[k] for k in compiled.params}), _avals({k: weights[k] for k in compiled.buffers}))
    precision = compiled.policy.precision
    policies = {p: LoweringPolicy.tuned(p, precision) for p in platforms}
    exported, shapes = export_all(lambda p: jax.jit(inference_fn(graph, policies[p])), graph, args, (key_data,),
                                  platforms, example_inputs)
    weights, synthetic = synthetic_lib.leave_out(weights, synthetic_weights)
    members = {fmt.GRAPH: graph.to_json().encode(), fmt.WEIGHTS: fmt.weights_bytes(weights),
               fmt.STRATEGY: json.dumps(Strategy(precision=precision).to_dict()).encode()}
    members.update({fmt.exported_member(p): data for p, data in exported.items()})
    manifest = {"kind": "inference",
                "feeds": [fmt.tensor_spec(t) for t in graph.feeds],
                "fetches": [fmt.tensor_spec(t) for t in graph.fetches],
                "key_data": key_data.tolist(),
                "exported": {p: {"member": fmt.exported_member(p), **shapes} for p in platforms},
                "lowering": fmt.lowering_record(policies, precision),
                **({"synthetic_weights": synthetic} if synthetic else {})}
    data, manifest = fmt.pack(members, manifest)
    atomic_write(path, data)
    return manifest


def _is_train_step(model) -> bool:
    # NOTE: duck-typed (training.TrainStep imports paddle; a TrainArtifact does not).
    return all(hasattr(model, a) for a in ("graph", "state", "config", "schedule"))


def _compiled_model(model) -> CompiledModel:
    # NOTE: duck-typed on XlaModel.compiled, so this module never imports api (and so paddle).
    compiled = getattr(model, "compiled", model)
    if not isinstance(compiled, CompiledModel):
        raise ExportError(f"export() takes a paddle_xla.compile() result, a CompiledModel or a "
                          f"paddle_xla.train_step(), not a {type(model).__name__}.")
    return compiled


def _check_platforms(platforms: Sequence[str]) -> list[str]:
    platforms = [platforms] if isinstance(platforms, str) else list(platforms)
    bad = [p for p in platforms if p not in fmt.PLATFORMS]
    if bad or not platforms:
        raise ExportError(f"Unknown platform(s) {bad}; choose from {list(fmt.PLATFORMS)}.")
    return list(dict.fromkeys(platforms))


def inference_fn(graph: Graph, policy: LoweringPolicy):
    """f(params, buffers, feeds, key_data) -> fetches: the function an artifact serializes."""
    fn = lower(graph, policy)

    def f(params, buffers, feeds, key_data):
        # NOTE: raw key data, not a key: a typed key array does not cross the serialization boundary.
        fetches, _ = fn(params, buffers, feeds, jax.random.wrap_key_data(key_data))
        return fetches
    return f


def export_all(make_f, graph: Graph, head: tuple, tail: tuple, platforms,
               example_inputs) -> tuple[dict[str, bytes], dict]:
    """Serialized executables of make_f(platform)(*head, feeds, *tail) by platform, and how the feed
    shapes were chosen."""
    feed_specs, shapes = _symbolic_specs(graph), "symbolic"
    try:
        first = jax.export.export(make_f(platforms[0]), platforms=[platforms[0]])(*head, feed_specs, *tail)
    except Exception as e:  # NOTE: e.g. shape arithmetic kept in NumPy cannot take a symbolic dimension
        if example_inputs is None:
            raise ExportError(f"The program does not export with symbolic dimensions ({type(e).__name__}: "
                              f"{e}). Pass example_inputs=[...] to export it for those concrete shapes.") from e
        feed_specs, shapes = _concrete_specs(graph, example_inputs), "concrete"
        first = None
    out = {}
    for p in platforms:
        try:
            exp = first if (first is not None and p == platforms[0]) else \
                jax.export.export(make_f(p), platforms=[p])(*head, feed_specs, *tail)
        except Exception as e:
            raise ExportError(f"Exporting for platform {p!r} failed: {type(e).__name__}: {e}") from e
        out[p] = bytes(exp.serialize())
    feeds = {k: [d if isinstance(d, int) else str(d) for d in v.shape] for k, v in feed_specs.items()}
    return out, {"shapes": shapes, "feed_shapes": feeds}


def _avals(tree: Mapping[str, Any]) -> dict[str, jax.ShapeDtypeStruct]:
    return {k: jax.ShapeDtypeStruct(np.shape(v), v.dtype) for k, v in tree.items()}


def _symbolic_specs(graph: Graph) -> dict[str, jax.ShapeDtypeStruct]:
    """A None dimension at position i is the symbol d<i>, shared by all inputs."""
    # NOTE: sharing by position matches the usual case (batch first, sequence second, the same in
    # every input); unrelated dims wrongly shared only make a call fall back to re-lowering.
    scope = jax.export.SymbolicScope()   # NOTE: one scope, so that d0 of two inputs is one symbol
    out = {}
    for t in graph.feeds:
        dims = ",".join(f"d{i}" if d < 0 else str(d) for i, d in enumerate(t.shape))
        shape = jax.export.symbolic_shape(dims, scope=scope) if t.shape else ()
        out[t.name] = jax.ShapeDtypeStruct(shape, jax_dtype(t.dtype))
    return out


def _concrete_specs(graph: Graph, example_inputs) -> dict[str, jax.ShapeDtypeStruct]:
    if isinstance(example_inputs, Mapping):
        bound = feeds_mod.bind(graph.feeds, (), example_inputs)
    else:
        bound = feeds_mod.bind(graph.feeds, list(example_inputs), {})
    arrays = {t.name: feeds_mod.check(t, bound[t.name]) for t in graph.feeds}
    return {k: jax.ShapeDtypeStruct(tuple(v.shape), v.dtype) for k, v in arrays.items()}
