"""Paddle -> Graph. The only module that reads Paddle's IR (PIR).

Three sources: an nn.Layer plus InputSpecs (through paddle.jit.to_static), a static Program built
under paddle.static.program_guard, and a saved inference model (paddle.jit.save output).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import paddle

from .errors import CaptureError, ModelLoadError
from .graph import Block, Graph, Op, Param, Tensor

# Attributes every op carries that say nothing about what it computes. Dropped in this one place,
# so a lowering never sees them and every other attribute it does not expect is an error.
BOOKKEEPING_ATTRS = frozenset({
    "op_callstack", "struct_name", "stop_gradient", "persistable", "place", "is_persistable",
    "op_role", "op_namescope", "with_quant_attr", "op_device", "chunk_id", "execution_stream",
    "scheduling_priority", "force_record_event", "event_to_record", "events_to_wait",
})

# In-place ops (PIR names ending in "_"): which output holds the new value of which operand.
# Later reads of that operand see the output, and a persistable operand (BatchNorm's running
# statistics) becomes a buffer update. Ops not listed write operand 0 into output 0.
INPLACE_WRITES = {
    "pd_op.batch_norm_": {1: 1, 2: 2},
    "pd_op.sync_batch_norm_": {1: 1, 2: 2},
    "pd_op.assign_out_": {0: 1},
}

_PADDLE_DIR = os.path.dirname(os.path.abspath(paddle.__file__))
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_FRAME = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.*)')


@dataclass
class Captured:
    """What capture returns: the Graph, its weights, and how to map them back to the Layer."""
    graph: Graph
    weights: dict[str, np.ndarray]
    state_keys: dict[str, str] = field(default_factory=dict)   # param name -> state_dict key


def dtype_name(dt) -> str | None:
    """Paddle DataType / VarType / numpy dtype -> 'float32', 'int64', ... (None for UNDEFINED)."""
    if isinstance(dt, str):
        return dt
    name = str(dt).split(".")[-1].lower()
    aliases = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64",
               "undefined": None}
    return aliases.get(name, name)


# ---- source lines and attributes ----------------------------------------------------------
def user_source(callstack: Sequence[str]) -> str:
    """The deepest frame of the call stack that is the user's code, not Paddle's or ours."""
    best = ""
    for i, line in enumerate(callstack or ()):
        m = _FRAME.match(line)
        if not m:
            continue
        path = os.path.abspath(m["file"])
        if path.startswith(_PADDLE_DIR) or path.startswith(_OWN_DIR) or "<frozen" in path:
            continue
        code = callstack[i + 1].strip() if i + 1 < len(callstack) else ""
        best = f"{m['file']}:{m['line']} in {m['func']}" + (f": {code}" if code else "")
    return best


def _plain(v: Any) -> Any:
    """An attribute value as plain JSON-able Python."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if type(v).__name__ in ("DataType", "VarType"):
        return dtype_name(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    return str(v)


def _attrs(op) -> dict[str, Any]:
    return {k: _plain(v) for k, v in op.attrs().items() if k not in BOOKKEEPING_ATTRS}


def _shape(value) -> tuple[int, ...]:
    return tuple(int(d) for d in value.shape)


# ---- PIR program -> Graph ------------------------------------------------------------------
class _Reader:
    """Walks a PIR program once, numbering values and collecting feeds, params and fetches."""

    def __init__(self):
        self.ids: dict[str, int] = {}
        self.feeds: list[Tensor] = []
        self.params: list[Param] = []
        self.param_by_value: dict[int, str] = {}
        self.fetch_by_name: list[tuple[str, int]] = []
        self.buffer_updates: list[tuple[str, int]] = []
        self.counter = 0

    def vid(self, value) -> int | None:
        if value is None or not value.initialized():
            return None
        return self.ids.setdefault(value.id, len(self.ids))

    def block(self, block, args=()) -> Block:
        ops = []
        for op in block.ops:
            converted = self.op(op)
            if converted is not None:
                ops.append(converted)
        return Block(args=tuple(self.vid(a) for a in args), ops=tuple(ops))

    def op(self, op) -> Op | None:
        name = op.name()
        attrs = op.attrs()
        outs = tuple(self.vid(r) for r in op.results())
        if name == "builtin.parameter":
            r = op.results()[0]
            p = Param(name=attrs["parameter_name"], value=outs[0], shape=_shape(r),
                      dtype=dtype_name(r.dtype), trainable=bool(_first(attrs.get("trainable", True))))
            self.params.append(p)
            self.param_by_value[outs[0]] = p.name
            return None
        if name in ("pd_op.data", "pd_op.feed"):
            r = op.results()[0]
            self.feeds.append(Tensor(name=attrs["name"], value=outs[0], shape=_shape(r),
                                     dtype=dtype_name(r.dtype)))
            return None
        if name == "pd_op.fetch":
            self.fetch_by_name.append((attrs["name"], self.vid(op.operands_source()[0])))
            return None
        operands = op.operands_source()
        inputs = tuple(self.vid(v) for v in operands)
        blocks = self.sub_blocks(op, name)
        self.write_in_place(name, operands, inputs, outs)
        self.counter += 1
        return Op(name=name, inputs=inputs, outputs=outs, attrs=_attrs(op),
                  scope=str(attrs.get("struct_name", "")), source=user_source(attrs.get("op_callstack")),
                  blocks=blocks, index=self.counter)

    def write_in_place(self, name, operands, inputs, outs) -> None:
        if not name.endswith("_") or name.startswith("builtin."):
            return
        for out_i, in_i in INPLACE_WRITES.get(name, {0: 0}).items():
            if in_i >= len(inputs) or out_i >= len(outs) or inputs[in_i] is None or outs[out_i] is None:
                continue
            pname = self.param_by_value.get(inputs[in_i])
            if pname is not None:
                self.buffer_updates.append((pname, outs[out_i]))
                self.param_by_value[outs[out_i]] = pname
            # NOTE: PIR keeps the operand's Value; Paddle's semantics are that later readers see the write.
            self.ids[operands[in_i].id] = outs[out_i]

    def sub_blocks(self, op, name) -> tuple[Block, ...]:
        if name == "pd_op.if":
            if_op = op.as_if_op()
            return (self.block(if_op.true_block()), self.block(if_op.false_block()))
        if name == "pd_op.while":
            body = op.as_while_op().body()
            return (self.block(body, body.args()),)
        return tuple(self.block(b) for b in op.blocks())


def _first(v):
    return v[0] if isinstance(v, (list, tuple)) and v else v


def program_to_graph(program, fetch_values=(), fetch_names=None, meta=None) -> Graph:
    """Read a PIR Program. Fetches come from `fetch_values` or the program's own pd_op.fetch ops."""
    reader = _Reader()
    block = reader.block(program.global_block())
    if fetch_values:
        names = fetch_names or [f"fetch_{i}" for i in range(len(fetch_values))]
        pairs = [(n, reader.vid(v)) for n, v in zip(names, fetch_values)]
    else:
        pairs = reader.fetch_by_name
    if not pairs:
        raise CaptureError("The program has no outputs: give fetch_list, or return tensors from forward().")
    fetches = tuple(Tensor(name=n, value=v, shape=(), dtype="") for n, v in pairs)
    return Graph(block=block, feeds=tuple(reader.feeds), params=tuple(reader.params),
                 fetches=fetches, buffer_updates=tuple(reader.buffer_updates), meta=dict(meta or {}))


def _with_fetch_info(graph: Graph, values) -> Graph:
    """Fill the fetch shapes/dtypes from the PIR values (known only on the Paddle side)."""
    fetches = tuple(Tensor(name=f.name, value=f.value, shape=_shape(v), dtype=dtype_name(v.dtype))
                    for f, v in zip(graph.fetches, values))
    return Graph(block=graph.block, feeds=graph.feeds, params=graph.params, fetches=fetches,
                 buffer_updates=graph.buffer_updates, meta=graph.meta)


# ---- the three sources ---------------------------------------------------------------------
def _flatten_outputs(out) -> list:
    if isinstance(out, (list, tuple)):
        return [v for o in out for v in _flatten_outputs(o)]
    if isinstance(out, dict):
        return [v for o in out.values() for v in _flatten_outputs(o)]
    return [out] if out is not None else []


def from_layer(layer, input_spec, training: bool | None = None) -> Captured:
    """Capture an nn.Layer with paddle.jit.to_static(full_graph=True), in its current mode
    (or the mode `training` asks for, restored afterwards)."""
    if not isinstance(layer, paddle.nn.Layer):
        raise CaptureError(f"Expected a paddle.nn.Layer, got {type(layer).__name__}.")
    specs = list(input_spec or [])
    if not specs:
        raise CaptureError("input_spec is empty: give one paddle.static.InputSpec per forward() input.")
    was_training = layer.training
    if training is not None:
        layer.train() if training else layer.eval()
    try:
        program = _concrete_program(layer, specs)
    finally:
        layer.train() if was_training else layer.eval()
    outputs = _flatten_outputs(program.outputs)
    names = [f"output_{i}" for i in range(len(outputs))]
    mode = layer.training if training is None else training
    graph = program_to_graph(program.main_program, outputs, names,
                             meta={"source": type(layer).__name__, "training": bool(mode)})
    graph = _with_fetch_info(graph, outputs)
    weights = {p.name: p.numpy() for p in program.parameters[0]}
    state_keys = {t.name: k for k, t in layer.state_dict().items()}
    _check_weights(graph, weights)
    return Captured(graph, weights, state_keys)


def _concrete_program(layer, specs):
    try:
        static = paddle.jit.to_static(layer, input_spec=specs, full_graph=True)
        return static.forward.concrete_program
    except OSError as e:
        raise CaptureError(
            f"Paddle could not read the source of {type(layer).__name__}.forward ({e}). to_static needs "
            "the model defined in a file, not in exec'd code or on stdin.") from None
    except Exception as e:
        detail = str(e).strip()
        raise CaptureError(f"paddle.jit.to_static could not capture {type(layer).__name__}.forward "
                           f"({type(e).__name__}):\n{detail[-3000:]}") from e


def _check_weights(graph: Graph, weights) -> None:
    missing = [p.name for p in graph.params if p.name not in weights]
    if missing:
        raise CaptureError(f"No value for the persistables {missing}; run the startup program first.")


def from_program(program, feed_names: Sequence[str] | None = None, fetch_list=(), scope=None) -> Captured:
    """Capture a static PIR Program; weights come from `scope` (default: the global scope)."""
    fetch_list = list(fetch_list)
    graph = program_to_graph(program, fetch_list, [getattr(v, "name", None) or f"fetch_{i}"
                                                   if _has_name(v) else f"fetch_{i}"
                                                   for i, v in enumerate(fetch_list)],
                             meta={"source": "static Program"})
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
            f"and {path_prefix}.pdiparams, as paddle.jit.save writes them.")
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
        raise ModelLoadError(f"Paddle could not read the saved model {model_file!r}: "
                             f"{type(e).__name__}: {str(e).strip()[:300]}") from None
    finally:
        if not was_static:
            paddle.disable_static()
    return captured
