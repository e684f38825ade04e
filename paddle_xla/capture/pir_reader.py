"""A PIR Program -> Graph, op by op. With sources.py, the only code that reads Paddle's IR.

In-place ops (PIR names ending in "_") write one of their operands: Paddle's own op definitions say
which output holds the new value of which operand (`get_op_inplace_info`), so there is no table of
ours to fall out of date. Later readers of the operand see the output, and a write to a persistable
(BatchNorm's running statistics) becomes a buffer update.

A write is seen by the rest of its own block and the blocks inside it, never by a sibling branch.
A write inside a sub-block to a value defined outside it leaves the block as an extra result: an
`if` yields it from both branches (the other branch yields the value as it was), a `while` carries
it from iteration to iteration. After the op, outer readers see that result, as they see Paddle's
shared memory."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import paddle
from paddle.base.libpaddle import pir
from paddle.jit.dy2static.origin_info import global_origin_info_map

from ..errors import CaptureError
from ..graph import Block, Graph, Op, Param, Tensor

# Attributes every op carries that say nothing about what it computes. Dropped in this one place,
# so a lowering never sees them and every other attribute it does not expect is an error.
BOOKKEEPING_ATTRS = frozenset(
    {
        "op_callstack",
        "struct_name",
        "stop_gradient",
        "persistable",
        "place",
        "is_persistable",
        "op_role",
        "op_namescope",
        "with_quant_attr",
        "op_device",
        "chunk_id",
        "execution_stream",
        "scheduling_priority",
        "force_record_event",
        "event_to_record",
        "events_to_wait",
        # NOTE: semi-auto parallel's per-op placements; the weights' own (Param.dims_mapping) are what is read.
        "op_dist_attr",
    }
)

_PADDLE_DIR = os.path.dirname(os.path.abspath(paddle.__file__))
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_FRAME = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.*)')


def dtype_name(dt) -> str | None:
    """Paddle DataType / VarType / numpy dtype -> 'float32', 'int64', ... (None for UNDEFINED)."""
    if isinstance(dt, str):
        return dt
    name = str(dt).split(".")[-1].lower()
    aliases = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64", "undefined": None}
    return aliases.get(name, name)


# NOTE: "in place" in Paddle's op info, but they write no new values: the output shares the operand's
# memory (Tensor.detach()). Later readers of the operand must keep reading it, gradient and all; seeing
# the detached output instead would cut the gradient of every later use.
ALIASES_ONLY = ("pd_op.share_data_",)


def inplace_pairs(op) -> dict[int, int]:
    """{output index: operand index} of an op that writes operands in place, from Paddle's op info."""
    if not op.name().endswith("_") or op.name().startswith(("builtin.", "cf.")) or op.name() in ALIASES_ONLY:
        return {}
    return dict(pir.get_op_inplace_info(op))


# ---- source lines and attributes ----------------------------------------------------------
def user_source(callstack: Sequence[str]) -> str:
    """The deepest frame of the call stack that is the user's code, not Paddle's or ours. A frame of the
    code to_static generated is mapped back to the user's line it came from (Paddle's origin map)."""
    best = ""
    for i, line in enumerate(callstack or ()):
        m = _FRAME.match(line)
        if not m:
            continue
        file, lineno, func = m["file"], int(m["line"]), m["func"]
        code = callstack[i + 1].strip() if i + 1 < len(callstack) else ""
        origin = global_origin_info_map.get((file, lineno))
        if origin is not None:
            file, lineno, func, code = origin.as_frame()
        path = os.path.abspath(file)
        if (
            path.startswith(_PADDLE_DIR)
            or path.startswith(_OWN_DIR)
            or "<frozen" in path
            or file.startswith("<paddle_xla")
            or "to_static_tmp" in path
        ):
            continue
        best = f"{file}:{lineno} in {func}" + (f": {code}" if code else "")
    return best


class _UnknownAttr(Exception):
    pass


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
    raise _UnknownAttr(type(v).__name__)


def _attrs(op) -> dict[str, Any]:
    out = {}
    for k, v in op.attrs().items():
        if k in BOOKKEEPING_ATTRS:
            continue
        try:
            out[k] = _plain(v)
        except _UnknownAttr as e:
            # NOTE: a value turned into its str() would reach the lowering as a different thing.
            where = user_source(op.attrs().get("op_callstack")) or "(no user source line)"
            raise CaptureError(
                f"{op.name()} has attribute {k!r} of type {e}, which paddle_xla cannot read "
                f"(at {where}). Please file an issue naming the op and the attribute."
            ) from None
    return out


def shape_of(value) -> tuple[int, ...]:
    return tuple(int(d) for d in value.shape)


def _annotation(value) -> dict:
    """Paddle's dist.shard_tensor placement of a weight, as plain data (empty when it has none)."""
    if not (hasattr(value, "is_dist") and value.is_dist()):
        return {}
    attr = value.dist_attr()
    mesh = attr.process_mesh
    return {
        "dims_mapping": tuple(int(d) for d in attr.dims_mapping),
        "mesh_axes": tuple(mesh.dim_names),
        "mesh_shape": tuple(int(n) for n in mesh.shape),
    }


def _first(v):
    return v[0] if isinstance(v, (list, tuple)) and v else v


# ---- in-place writes, scoped per block ----------------------------------------------------------
class _Scope:
    """The in-place renames one block sees: its own and those of the blocks around it."""

    def __init__(self, parent: _Scope | None = None):
        self.parent = parent
        self.alias: dict[Any, int] = {}  # PIR value id -> our id of its newest value
        self.defined: set = set()  # PIR value ids defined in this block (results, args)
        self.escaped: dict[Any, int] = {}  # outer PIR value id -> its newest value, written here

    def lookup(self, pid) -> int | None:
        scope = self
        while scope is not None:
            if pid in scope.alias:
                return scope.alias[pid]
            scope = scope.parent
        return None


class Reader:
    """Walks a PIR program once, numbering values and collecting feeds, params and fetches."""

    def __init__(self, spans: Sequence = ()):
        # NOTE: layer_ops.py's spans: each run of a stand-in's ops is read as one op, at its last op
        self.span_at = {span.op_ids[-1]: span for span in spans if span.op_ids}
        self.in_span = {i for span in spans for i in span.op_ids}
        self.ids: dict[Any, int] = {}
        self.next_id = 0
        self.scope: _Scope | None = None
        self.feeds: list[Tensor] = []
        self.params: list[Param] = []
        self.param_by_value: dict[int, str] = {}
        self.fetch_by_name: list[tuple[str, int]] = []
        self.buffer_updates: list[tuple[str, int]] = []
        self.counter = 0

    # -- values --
    def fresh(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def vid(self, value) -> int | None:
        """Our id of the newest value behind a PIR value, as the current block sees it."""
        if value is None or not value.initialized():
            return None
        found = self.scope.lookup(value.id) if self.scope is not None else None
        if found is not None:
            return found
        if value.id not in self.ids:
            self.ids[value.id] = self.fresh()
        return self.ids[value.id]

    def define(self, value) -> int | None:
        """A value the current block defines (an op result or a block argument)."""
        if value is None or not value.initialized():
            return None
        self.scope.defined.add(value.id)
        return self.vid(value)

    def write(self, pid, new: int) -> None:
        """The PIR value `pid` now holds our value `new`, for the rest of this block."""
        scope = self.scope
        old = self.vid_of(pid)
        scope.alias[pid] = new
        if scope.parent is not None:
            if pid not in scope.defined:
                scope.escaped[pid] = new
            return
        pname = self.param_by_value.get(old)
        if pname is not None:
            self.buffer_updates.append((pname, new))
            self.param_by_value[new] = pname

    def vid_of(self, pid) -> int | None:
        found = self.scope.lookup(pid)
        return found if found is not None else self.ids.get(pid)

    # -- blocks and ops --
    def block(self, block, args=()) -> tuple[Block, _Scope]:
        self.scope = _Scope(self.scope)
        try:
            # NOTE: arguments first: a write to one inside the block renames it for later readers only.
            arg_ids = tuple(self.define(a) for a in args)
            ops = tuple(o for o in (self.op(op) for op in block.ops) if o is not None)
            return Block(args=arg_ids, ops=ops), self.scope
        finally:
            self.scope = self.scope.parent

    def op(self, op) -> Op | None:
        if op.id() in self.in_span:
            return self.layer_op(self.span_at[op.id()]) if op.id() in self.span_at else None
        name = op.name()
        attrs = op.attrs()
        if name == "builtin.parameter":
            r = op.results()[0]
            p = Param(
                name=attrs["parameter_name"],
                value=self.define(r),
                shape=shape_of(r),
                dtype=dtype_name(r.dtype),
                trainable=bool(_first(attrs.get("trainable", True))),
                **_annotation(r),
            )
            self.params.append(p)
            self.param_by_value[p.value] = p.name
            return None
        if name in ("pd_op.data", "pd_op.feed"):
            r = op.results()[0]
            self.feeds.append(
                Tensor(name=attrs["name"], value=self.define(r), shape=shape_of(r), dtype=dtype_name(r.dtype))
            )
            return None
        if name == "pd_op.fetch":
            self.fetch_by_name.append((attrs["name"], self.vid(op.operands_source()[0])))
            return None
        operands = op.operands_source()
        inputs = tuple(self.vid(v) for v in operands)
        blocks, scopes = self.sub_blocks(op, name)
        outs = tuple(self.define(r) for r in op.results())
        self.counter += 1
        out = Op(
            name=name,
            inputs=inputs,
            outputs=outs,
            attrs=_attrs(op),
            scope=str(attrs.get("struct_name", "")),
            source=user_source(attrs.get("op_callstack")),
            blocks=blocks,
            index=self.counter,
        )
        out = self.carry_out(out, scopes)
        for out_i, in_i in inplace_pairs(op).items():
            if in_i < len(inputs) and out_i < len(outs) and inputs[in_i] is not None and outs[out_i] is not None:
                self.write(operands[in_i].id, outs[out_i])
        return out

    def layer_op(self, span) -> Op:
        """A registered layer's call as one op: its input and weights in, the stand-in's outputs out."""
        self.counter += 1
        inputs = tuple(self.vid(v) for v in span.inputs)
        outs = tuple(self.define(v) for v in span.outputs)
        return Op(name=span.op, inputs=inputs, outputs=outs, attrs=dict(span.attrs), index=self.counter)

    def sub_blocks(self, op, name) -> tuple[tuple[Block, ...], tuple[_Scope, ...]]:
        if name == "pd_op.if":
            if_op = op.as_if_op()
            read = [self.block(if_op.true_block()), self.block(if_op.false_block())]
        elif name == "pd_op.while":
            body = op.as_while_op().body()
            read = [self.block(body, body.args())]
        else:
            read = [self.block(b) for b in op.blocks()]
        return tuple(b for b, _ in read), tuple(s for _, s in read)

    def carry_out(self, op: Op, scopes: Sequence[_Scope]) -> Op:
        """`op` with the outer values its sub-blocks wrote as extra results, which outer readers see next."""
        pids = list(dict.fromkeys(pid for s in scopes for pid in s.escaped))
        if not pids:
            return op
        if op.name == "pd_op.if":
            op = _if_yielding(
                op,
                [[s.escaped.get(pid, self.vid_of(pid)) for pid in pids] for s in scopes],
                [self.fresh() for _ in pids],
            )
        elif op.name == "pd_op.while":
            before = [self.vid_of(pid) for pid in pids]
            op = _while_carrying(
                op,
                before,
                [scopes[0].escaped[pid] for pid in pids],
                [self.fresh() for _ in pids],
                [self.fresh() for _ in pids],
            )
        else:
            raise CaptureError(
                f"{op.name} writes values defined outside its blocks in place, which paddle_xla "
                f"cannot capture (at {op.source or '(no user source line)'})."
            )
        for pid, new in zip(pids, op.outputs[-len(pids) :]):
            self.write(pid, new)
        return op


def _nearest_sources(block: Block, outer: str) -> Block:
    """Ops Paddle gives no call stack (pd_op.if, pd_op.assert, constants) take the source line of the
    nearest op that has one: a constant the next one's, any other the one before it (or the enclosing
    op's), so every report points into the user's code."""
    known = [op.source for op in block.ops]
    ops = []
    for i, op in enumerate(block.ops):
        before = next((s for s in reversed(known[:i]) if s), "") or outer
        after = next((s for s in known[i + 1 :] if s), "")
        # NOTE: an op that reads nothing is a constant made for the op after it; others follow what fed them.
        source = op.source or ((after or before) if not any(v is not None for v in op.inputs) else (before or after))
        inner = tuple(_nearest_sources(b, source) for b in op.blocks)
        ops.append(
            dataclasses.replace(op, source=source, blocks=inner) if (source, inner) != (op.source, op.blocks) else op
        )
    return Block(args=block.args, ops=tuple(ops))


def _with_yield(block: Block, extra: Sequence[int], args: Sequence[int] = ()) -> Block:
    """`block` yielding `extra` after its own values (and taking `args` after its own arguments)."""
    *body, last = block.ops
    if last.name != "cf.yield":
        raise CaptureError(f"A sub-block ends in {last.name}, not cf.yield; paddle_xla cannot capture it.")
    last = dataclasses.replace(last, inputs=last.inputs + tuple(extra))
    return Block(args=block.args + tuple(args), ops=(*body, last))


def _if_yielding(op: Op, per_branch: Sequence[Sequence[int]], outs: Sequence[int]) -> Op:
    blocks = tuple(_with_yield(b, vals) for b, vals in zip(op.blocks, per_branch))
    return dataclasses.replace(op, blocks=blocks, outputs=op.outputs + tuple(outs))


def _while_carrying(
    op: Op, before: Sequence[int], written: Sequence[int], args: Sequence[int], outs: Sequence[int]
) -> Op:
    """A while op that carries each outer value the body writes: it enters as `before`, the body
    reads it as a new argument, and yields what it `written` for the next iteration."""
    # NOTE: body reads of the outer value that come before the write see last iteration's write.
    (body,) = op.blocks
    body = _renamed(body, dict(zip(before, args)))
    body = _with_yield(body, written, args)
    return dataclasses.replace(op, inputs=op.inputs + tuple(before), blocks=(body,), outputs=op.outputs + tuple(outs))


def _renamed(block: Block, mapping: dict[int, int]) -> Block:
    def op_(op: Op) -> Op:
        return dataclasses.replace(
            op,
            inputs=tuple(mapping.get(v, v) for v in op.inputs),
            blocks=tuple(_renamed(b, mapping) for b in op.blocks),
        )

    return Block(args=block.args, ops=tuple(op_(o) for o in block.ops))


def program_to_graph(program, fetch_values=(), fetch_names=None, meta=None, spans=()) -> Graph:
    """Read a PIR Program. Fetches come from `fetch_values` or the program's own pd_op.fetch ops; `spans`
    (layer_ops.py) are runs of ops read as one layer op each."""
    reader = Reader(spans)
    reader.scope = _Scope()  # NOTE: the global block's scope stays open while the fetches are read
    block = Block(args=(), ops=tuple(o for o in (reader.op(op) for op in program.global_block().ops) if o is not None))
    if fetch_values:
        names = fetch_names or [f"fetch_{i}" for i in range(len(fetch_values))]
        pairs = [(n, reader.vid(v)) for n, v in zip(names, fetch_values)]
    else:
        pairs = reader.fetch_by_name
    if not pairs:
        raise CaptureError("The program has no outputs: give fetch_list, or return tensors from forward().")
    fetches = tuple(Tensor(name=n, value=v, shape=(), dtype="") for n, v in pairs)
    block = _nearest_sources(block, "")
    return Graph(
        block=block,
        feeds=tuple(reader.feeds),
        params=tuple(reader.params),
        fetches=fetches,
        buffer_updates=tuple(reader.buffer_updates),
        meta=dict(meta or {}),
    )
