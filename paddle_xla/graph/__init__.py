"""The Graph: a Paddle program as plain frozen dataclasses. Paddle-free, JSON-serialisable.

A Graph holds structure only; weights travel beside it as a dict name -> numpy array. Besides the
dataclasses and their JSON format (FORMAT_VERSION), this module answers data-flow questions (readers,
read_counts, value_ids, op_reads); patterns.py holds op patterns that several rewrites look for.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from ..errors import ModelLoadError

# NOTE: (major, minor). A minor version only adds what older readers may ignore, so any minor of this
# major reads; a newer major does not. Written as "1.0"; format 1 files before that wrote the int 1.
FORMAT_VERSION = (1, 1)  # 1.1: Param.dims_mapping / mesh_axes / mesh_shape


@dataclass(frozen=True)
class Op:
    name: str  # Paddle op name, e.g. "pd_op.matmul"
    inputs: tuple[int | None, ...]  # value ids; None for an absent optional operand
    outputs: tuple[int, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    scope: str = ""  # layer path (Paddle's struct_name)
    source: str = ""  # the user's file:line that created the op
    blocks: tuple[Block, ...] = ()  # sub-blocks of control-flow ops
    index: int = 0  # position in the program; seeds random ops


@dataclass(frozen=True)
class Block:
    args: tuple[int, ...]  # block arguments (loop-carried values of a while body)
    ops: tuple[Op, ...]

    def walk(self) -> Iterator[Op]:
        """Every op of this block and its sub-blocks, depth first."""
        for op in self.ops:
            yield op
            for b in op.blocks:
                yield from b.walk()


@dataclass(frozen=True)
class Tensor:
    name: str
    value: int
    shape: tuple[int, ...]  # -1 marks a dimension fixed only at call time
    dtype: str


@dataclass(frozen=True)
class Param(Tensor):
    trainable: bool = True
    # NOTE: Paddle's semi-auto parallel annotation (dist.shard_tensor), when the program carries one: per
    # dimension the mesh axis it is split over (-1: none), and the mesh's axis names and sizes.
    dims_mapping: tuple[int, ...] = ()
    mesh_axes: tuple[str, ...] = ()
    mesh_shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class Graph:
    block: Block
    feeds: tuple[Tensor, ...]
    params: tuple[Param, ...]  # every persistable: trainable weights and buffers
    fetches: tuple[Tensor, ...]
    buffer_updates: tuple[tuple[str, int], ...] = ()  # (param name, value id) written in place
    meta: Mapping[str, Any] = field(default_factory=dict)

    def ops(self) -> Iterator[Op]:
        return self.block.walk()

    def op_names(self) -> list[str]:
        return sorted({op.name for op in self.ops()})

    def trainable(self) -> list[Param]:
        return [p for p in self.params if p.trainable]

    def buffers(self) -> list[Param]:
        return [p for p in self.params if not p.trainable]

    def readers(self) -> dict[int, list[tuple[str, int]]]:
        """value id -> (op name, operand position) of every op, in any block, that reads it."""
        out: dict[int, list[tuple[str, int]]] = {}
        for op in self.ops():
            for i, v in enumerate(op.inputs):
                if v is not None:
                    out.setdefault(v, []).append((op.name, i))
        return out

    def read_counts(self) -> Counter:
        """value id -> how often it is read: once per operand of every op in any block, and once more for each
        fetch or written-back buffer (a reader outside the program). A rewrite that drops a value checks
        that every read of it is its own."""
        out = Counter(v for op in self.ops() for v in op.inputs if v is not None)
        out.update([f.value for f in self.fetches] + [v for _, v in self.buffer_updates])
        return out

    def value_ids(self) -> set[int]:
        """Every value id the program uses (0 included), so a rewrite can make new ones above them."""
        out = {f.value for f in self.feeds} | {p.value for p in self.params} | {0}
        for op in self.ops():
            out.update(v for v in op.inputs if v is not None)
            out.update(op.outputs)
        return out

    def params_read_only_by(self, accepts: Callable[[str, int], bool]) -> set[str]:
        """Names of parameters whose every reader passes `accepts(op_name, operand_position)`, and that
        the program neither fetches nor writes back: a runtime may hold such a weight in another
        layout or precision, since no one else sees it."""
        readers = self.readers()
        exposed = {f.value for f in self.fetches} | {v for _, v in self.buffer_updates}
        return {
            p.name
            for p in self.params
            if p.value not in exposed and readers.get(p.value) and all(accepts(name, i) for name, i in readers[p.value])
        }

    def unused_by(self, fetch_index: int) -> list[str]:
        """Trainable parameters that fetch `fetch_index` (a loss) does not depend on: Paddle's backward
        gives them no gradient, so its optimizers leave them (and their moments) untouched."""
        needed = upstream_values(self.block, {self.fetches[fetch_index].value})
        return [p.name for p in self.params if p.trainable and p.value not in needed]

    def with_frozen(self, names: Iterable[str]) -> Graph:
        """This Graph with the named parameters marked not trainable."""
        frozen = set(names)
        params = tuple(dataclasses.replace(p, trainable=False) if p.name in frozen else p for p in self.params)
        return dataclasses.replace(self, params=params)

    def summary(self) -> str:
        n_ops = sum(1 for _ in self.ops())
        n_w = sum(int(np.prod(p.shape)) for p in self.params)
        feeds = ", ".join(f"{f.name}:{f.dtype}{list(f.shape)}" for f in self.feeds)
        return f"Graph({n_ops} ops, {len(self.params)} persistables / {n_w:,} values, feeds: {feeds})"

    # ---- serialisation ------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps({"format_version": f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}", "graph": _encode(self)})

    @staticmethod
    def from_json(text: str) -> Graph:
        data = json.loads(text)
        _check_version(data.get("format_version"))
        return _decode_graph(data["graph"])


def _check_version(version: object) -> None:
    """Any minor version of this major reads; another major is refused with what to do."""
    try:
        major, minor = (version, 0) if isinstance(version, int) else map(int, str(version).split("."))
    except (TypeError, ValueError):
        raise ModelLoadError(f"The Graph has no readable format version ({version!r}); capture it again.") from None
    if major > FORMAT_VERSION[0]:
        raise ModelLoadError(
            f"The Graph has format version {major}.{minor}, written by a newer paddle_xla; this one "
            f"reads {FORMAT_VERSION[0]}.x. Upgrade paddle_xla (pip install -U paddle_xla)."
        )
    if major < FORMAT_VERSION[0]:
        raise ModelLoadError(
            f"The Graph has format version {major}.{minor}, older than this paddle_xla reads "
            f"({FORMAT_VERSION[0]}.x); capture the model again with this version."
        )


def _encode(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: _encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_encode(o) for o in obj]
    if isinstance(obj, Mapping):
        return {k: _encode(v) for k, v in obj.items()}
    return obj


def _decode_block(d: dict[str, Any]) -> Block:
    return Block(args=tuple(d["args"]), ops=tuple(_decode_op(o) for o in d["ops"]))


def _decode_op(d: dict[str, Any]) -> Op:
    return Op(
        name=d["name"],
        inputs=tuple(d["inputs"]),
        outputs=tuple(d["outputs"]),
        attrs=d["attrs"],
        scope=d["scope"],
        source=d["source"],
        blocks=tuple(_decode_block(b) for b in d["blocks"]),
        index=d["index"],
    )


_T = TypeVar("_T", bound=Tensor)


def _tensor(d: dict[str, Any], cls: type[_T] = Tensor) -> _T:  # type: ignore[assignment]  # NOTE: a TypeVar default
    # NOTE: fields a later minor version added are left out, as the version rule promises.
    known = {f.name for f in dataclasses.fields(cls)}
    fields: dict[str, Any] = {k: tuple(v) if k in _TUPLES else v for k, v in d.items() if k in known}
    return cls(**fields)


_TUPLES = frozenset({"shape", "dims_mapping", "mesh_axes", "mesh_shape"})


def _decode_graph(d: dict[str, Any]) -> Graph:
    return Graph(
        block=_decode_block(d["block"]),
        feeds=tuple(_tensor(t) for t in d["feeds"]),
        params=tuple(_tensor(t, Param) for t in d["params"]),
        fetches=tuple(_tensor(t) for t in d["fetches"]),
        buffer_updates=tuple((n, v) for n, v in d["buffer_updates"]),
        meta=d.get("meta", {}),
    )


# ---- graph + weights on disk ----------------------------------------------------------
def save(path: str, graph: Graph, weights: Mapping[str, np.ndarray]) -> None:
    """Write `path/graph.json` and `path/weights.safetensors`, each atomically."""
    from ..files import atomic_write, save_weights

    os.makedirs(path, exist_ok=True)
    atomic_write(os.path.join(path, "graph.json"), graph.to_json().encode())
    save_weights(os.path.join(path, "weights.safetensors"), weights)


def load(path: str) -> tuple[Graph, dict[str, np.ndarray]]:
    from ..files import load_weights

    gpath = os.path.join(path, "graph.json")
    try:
        with open(gpath, encoding="utf-8") as f:
            graph = Graph.from_json(f.read())
    except FileNotFoundError:
        raise ModelLoadError(f"No Graph at {gpath!r}: save one with paddle_xla.save_graph().") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ModelLoadError(f"The Graph at {gpath!r} is corrupt ({e}); capture and save it again.") from None
    return graph, load_weights(os.path.join(path, "weights.safetensors"))


def upstream_values(block: Block, targets: set[int]) -> set[int]:
    """Every value id the `targets` depend on through the ops of `block` (ops are in program order).

    NOTE: a control-flow op's sub-blocks may read outer values directly, not as operands, so every
    value a needed op's sub-blocks read counts as needed (conservative)."""
    needed = set(targets)
    for op in reversed(block.ops):
        if not needed.intersection(op.outputs):
            continue
        needed.update(v for v in op.inputs if v is not None)
        for sub in op.blocks:
            needed.update(v for inner in sub.walk() for v in inner.inputs if v is not None)
    return needed


# ---- data flow: which values an op reads ----
def block_reads(block: Block) -> set[int]:
    """Values a block reads from outside itself (PIR blocks read outer values by closure)."""
    defined = set(block.args)
    reads: set[int] = set()
    for op in block.ops:
        reads |= {v for v in op_reads(op) if v not in defined}
        defined |= set(op.outputs)
    return reads


def op_reads(op: Op) -> set[int]:
    """Every outer value an op reads: its operands and what its sub-blocks read by closure."""
    reads = {v for v in op.inputs if v is not None}
    for b in op.blocks:
        reads |= block_reads(b)
    return reads
