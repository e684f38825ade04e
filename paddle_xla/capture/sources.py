"""Paddle -> Graph. With pir_reader.py, the only code that reads Paddle's IR (PIR).

Three sources: an nn.Layer plus InputSpecs (through paddle.jit.to_static), a static Program built
under paddle.static.program_guard, and a saved inference model (paddle.jit.save output).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import paddle

from ..errors import CaptureError, ModelLoadError
from ..graph import Graph, Tensor
from . import moe_layers  # noqa: F401  (registers PaddleFormers' MoE blocks with layer_ops)
from .aborts import guarded, located
from .eager_only import eager_only
from .gpu_only_ops import gpu_only_ops
from .layer_ops import layer_ops
from .pir_reader import dtype_name, program_to_graph, shape_of
from .to_static_help import (
    hint,
    leave_accessors_to_python,
    leave_to_python,
    qualified,
    recursion_culprit,
    structure_culprit,
)


@dataclass
class Captured:
    """What capture returns: the Graph, its weights, and how to map them back to the Layer."""

    graph: Graph
    weights: dict[str, np.ndarray]
    state_keys: dict[str, str] = field(default_factory=dict)  # param name -> state_dict key


def _with_fetch_info(graph: Graph, values) -> Graph:
    """Fill the fetch shapes/dtypes from the PIR values (known only on the Paddle side)."""
    fetches = tuple(Tensor(name=f.name, value=f.value, **_shape_and_dtype(v)) for f, v in zip(graph.fetches, values))
    return Graph(
        block=graph.block,
        feeds=graph.feeds,
        params=graph.params,
        fetches=fetches,
        buffer_updates=graph.buffer_updates,
        meta=graph.meta,
    )


# ---- the three sources ---------------------------------------------------------------------
def _flatten_outputs(out) -> list:
    if isinstance(out, (list, tuple)):
        return [v for o in out for v in _flatten_outputs(o)]
    if isinstance(out, dict):
        return [v for o in out.values() for v in _flatten_outputs(o)]
    return [out] if out is not None else []


def _is_kv_cache(o) -> bool:
    """A PaddleFormers model's cache object (DynamicCache and its kin), which forward returns beside the
    logits under the default config's use_cache=True; wrap.py's training forward leaves it out by the same rule."""
    return type(o).__name__.endswith("Cache") and not isinstance(o, (paddle.pir.Value, list, tuple))


def _without_caches(outputs: list) -> list:
    """The outputs less a KV cache object and Python numbers: a compiled forward returns the logits, and a
    generator keeps its own cache (px.Generator), so a default config compiles as shipped; a number is a
    constant field of the model's output object (ERNIE 4.5 MoE's router_loss 0.0), not a result."""
    return [o for o in outputs if not _is_kv_cache(o) and not isinstance(o, (int, float))]


def _check_outputs(layer, outputs) -> None:
    """Refuse outputs that are not tensors here, with the fix, rather than deep inside the PIR reader."""
    for o in outputs:
        if not isinstance(o, paddle.pir.Value):
            raise CaptureError(
                f"{type(layer).__name__}.forward returns a {type(o).__name__} among its outputs, and a captured "
                "program returns tensors only: return tensors (or lists, tuples and dicts of them) only."
            )


def from_layer(layer, input_spec, training: bool | None = None, weights: bool = True) -> Captured:
    """Capture an nn.Layer with paddle.jit.to_static(full_graph=True), in its current mode
    (or the mode `training` asks for, restored afterwards). `weights=False` reads the program and the
    weights' shapes only, so a model built under paddle.LazyGuard() (too big to hold) can be planned."""
    if not isinstance(layer, paddle.nn.Layer):
        raise CaptureError(f"Expected a paddle.nn.Layer, got {type(layer).__name__}.")
    specs = list(input_spec or [])
    if not specs:
        raise CaptureError("input_spec is empty: give one paddle.static.InputSpec per forward() input.")
    was_training = layer.training
    if training is not None:
        layer.train() if training else layer.eval()
    try:
        program, spans = _concrete_program(layer, specs)
    finally:
        layer.train() if was_training else layer.eval()
    outputs = _without_caches(_flatten_outputs(program.outputs))
    _check_outputs(layer, outputs)
    names = [f"output_{i}" for i in range(len(outputs))]
    mode = layer.training if training is None else training
    graph = program_to_graph(
        program.main_program,
        outputs,
        names,
        meta={"source": type(layer).__name__, "training": bool(mode)},
        spans=spans,
    )
    graph = _in_spec_order(_with_fetch_info(graph, outputs), specs)
    state_keys = {t.name: k for k, t in layer.state_dict().items()}
    if not weights:
        return Captured(graph, {}, state_keys)
    values = {p.name: _weight(p, graph) for p in program.parameters[0]}
    _check_weights(graph, values)
    return Captured(graph, values, state_keys)


def _weight(p, graph: Graph) -> np.ndarray:
    """A weight's value. One that dist.shard_tensor split over the ranks of several processes (one per
    rank, as `paddle-xla launch` runs a script written for paddle.distributed.launch) is joined from
    every process's slice."""
    try:
        return p.numpy()
    except RuntimeError as e:
        if not (hasattr(p, "is_dist") and p.is_dist()):
            raise
        mesh = p.process_mesh
        if _processes() == mesh.size:
            return _joined(p)
        raise CaptureError(
            f"The weight {p.name!r} is split by paddle.distributed.shard_tensor over a process mesh of "
            f"{list(mesh.shape)}, "
            f"and this one process holds only its own slice ({list(p._local_value().shape)} of {list(p.shape)}; "
            f"Paddle says: {str(e).strip().splitlines()[0][:120]}). Either run the script in one process per rank, "
            f"`paddle-xla launch --nproc {mesh.size} script.py`, whose processes join their slices; or, in one "
            "process, build the model unannotated and say what to split with Strategy(tensor=N, "
            "tensor_plan={'*.linear1': dist.ColWiseParallel(), ...}), or annotate over a mesh of this process alone "
            "(dist.ProcessMesh([0], ...)): the split dimensions then set the tensor plan."
        ) from None


def _processes() -> int:
    import jax

    return jax.process_count()


def _joined(p) -> np.ndarray:
    """The whole weight from the slices every process holds: process r is Paddle's rank r (launch
    numbers both alike), and its slice sits at its mesh coordinates along each Shard(d) placement."""
    from jax.experimental import multihost_utils

    local = np.asarray(p._local_value().numpy())
    # NOTE: every process captures the same program, so all reach this gather in the same order
    parts = np.asarray(multihost_utils.process_allgather(local))
    mesh, placements = p.process_mesh, p.placements
    whole = np.empty(tuple(p.shape), local.dtype)
    for rank, part in enumerate(parts):
        coords = np.unravel_index(list(mesh.process_ids).index(rank), tuple(mesh.shape))
        where = [slice(None)] * whole.ndim
        for mesh_dim, placement in enumerate(placements):
            if placement.is_partial():
                raise CaptureError(
                    f"The weight {p.name!r} is a partial sum over the process mesh (Partial "
                    "placement); shard or replicate weights, as ColWise/RowWiseParallel do."
                )
            if placement.is_shard():
                d, n = placement.get_dim(), part.shape[placement.get_dim()]
                where[d] = slice(coords[mesh_dim] * n, (coords[mesh_dim] + 1) * n)
        whole[tuple(where)] = part
    return whole


def _shape_and_dtype(value) -> dict:
    # NOTE: an output an op leaves empty (fused_rms_norm's residual_out without a residual) has a null
    # type, whose shape and dtype Paddle cannot tell; the lowering knows them when it runs.
    try:
        return {"shape": shape_of(value), "dtype": dtype_name(value.dtype)}
    except (ValueError, RuntimeError):
        return {"shape": (), "dtype": ""}


def _spec_names(specs) -> list[str]:
    """The InputSpecs' names in the order the user wrote them (a dict of specs in its own order)."""
    out = []
    for s in specs:
        if isinstance(s, dict):
            out += _spec_names(list(s.values()))
        elif isinstance(s, (list, tuple)):
            out += _spec_names(s)
        elif getattr(s, "name", None):
            out.append(s.name)
    return out


def _in_spec_order(graph: Graph, specs) -> Graph:
    """Feeds in the InputSpecs' order: positional inputs follow it (Paddle creates a dict's in key order)."""
    order = {name: i for i, name in enumerate(_spec_names(specs))}
    if not all(f.name in order for f in graph.feeds):
        return graph
    feeds = tuple(sorted(graph.feeds, key=lambda f: order[f.name]))
    return dataclasses.replace(graph, feeds=feeds)


def _concrete_program(layer, specs):
    # NOTE: to_static replaces the Layer's forward with a static function for good; the user's
    # Layer must stay the eager model it was (to compare against, to keep training natively).
    had_own = "forward" in layer.__dict__
    own = layer.__dict__.get("forward")
    leave_accessors_to_python(layer)
    left: list[str] = []
    while True:
        found: list[str] = []
        try:
            with guarded() as found, gpu_only_ops(), eager_only(), layer_ops(layer) as spans:
                static = paddle.jit.to_static(layer, input_spec=specs, full_graph=True)
                return static.forward.concrete_program, list(spans)
        except Exception as e:
            if found:  # NOTE: a pattern that would have aborted the process (aborts.py)
                raise located(found[0], e) from None
            culprit = structure_culprit(e)
            if culprit is not None and len(left) < MAX_LEFT_TO_PYTHON and qualified(culprit) not in left:
                left.append(leave_to_python(culprit))
                continue
            _raise_capture_error(layer, e)
        finally:
            if had_own:
                layer.__dict__["forward"] = own
            else:
                layer.__dict__.pop("forward", None)


MAX_LEFT_TO_PYTHON = 8  # NOTE: functions left to Python in one capture, before its failure is reported


def _raise_capture_error(layer, e: Exception):
    """What to_static's failure means for the user, as a CaptureError."""
    name = type(layer).__name__
    if isinstance(e, OSError):
        raise CaptureError(
            f"Paddle could not read the source of {name}.forward ({e}). to_static needs the "
            "model defined in a file, not in exec'd code or on stdin."
        ) from None
    if isinstance(e, RecursionError):
        culprit = recursion_culprit(e) or "a function forward calls"
        raise CaptureError(
            f"paddle.jit.to_static recursed without end while converting {culprit} for {name}.forward. "
            "Leave it to Python: decorate it with @paddle.jit.not_to_static (or call "
            "paddle.jit.not_to_static on it) before capturing."
        ) from None
    detail = str(e).strip()
    raise CaptureError(
        f"paddle.jit.to_static could not capture {name}.forward ({type(e).__name__}):\n{detail[-3000:]}{hint(detail)}"
    ) from e


def _check_weights(graph: Graph, weights) -> None:
    missing = [p.name for p in graph.params if p.name not in weights]
    if missing:
        raise CaptureError(f"No value for the persistables {missing}; run the startup program first.")


def from_program(program, feed_names: Sequence[str] | None = None, fetch_list=(), scope=None) -> Captured:
    """Capture a static PIR Program; weights come from `scope` (default: the global scope)."""
    fetch_list = list(fetch_list)
    graph = program_to_graph(
        program,
        fetch_list,
        [getattr(v, "name", None) or f"fetch_{i}" if _has_name(v) else f"fetch_{i}" for i, v in enumerate(fetch_list)],
        meta={"source": "static Program"},
    )
    if fetch_list:
        graph = _with_fetch_info(graph, fetch_list)
    if feed_names is not None:
        known = {f.name for f in graph.feeds}
        unknown = [n for n in feed_names if n not in known]
        if unknown:
            raise CaptureError(f"feed names {unknown} are not inputs of the program; it has {sorted(known)}.")
    scope = scope or paddle.static.global_scope()
    weights = {p.name: _scope_array(scope, p.name) for p in graph.params}
    return Captured(graph, weights)


def _has_name(v) -> bool:
    try:
        return bool(v.name)
    except Exception:
        return False


def _scope_array(scope, name) -> np.ndarray:
    var = scope.find_var(name)
    if var is None:
        raise CaptureError(f"The persistable {name!r} is not in the scope; run the startup program first.")
    return np.array(var.get_tensor())


def from_inference_model(path_prefix: str) -> Captured:
    """Capture a model saved by paddle.jit.save / paddle.static.save_inference_model."""
    model_file = next((path_prefix + ext for ext in (".json", ".pdmodel") if os.path.exists(path_prefix + ext)), None)
    if model_file is None or not os.path.exists(path_prefix + ".pdiparams"):
        raise ModelLoadError(
            f"No saved inference model at {path_prefix!r}: expected {path_prefix}.json (or .pdmodel) "
            f"and {path_prefix}.pdiparams, as paddle.jit.save writes them."
        )
    was_static = not paddle.in_dynamic_mode()
    paddle.enable_static()
    try:
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            exe = paddle.static.Executor(paddle.CPUPlace())
            program, _feeds, fetches = paddle.static.load_inference_model(path_prefix, exe)
            captured = from_program(program, scope=scope)
    except (ModelLoadError, CaptureError):
        raise
    except Exception as e:
        raise ModelLoadError(
            f"Paddle could not read the saved model {model_file!r}: {type(e).__name__}: {str(e).strip()[:300]}"
        ) from None
    finally:
        if not was_static:
            paddle.disable_static()
    return captured
