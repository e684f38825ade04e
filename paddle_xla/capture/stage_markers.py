"""`with px.stage(k):` in model code puts the ops built inside on pipeline stage k (Paddle's
`ipu_shard_guard`, PopTorch's `BeginBlock`).

In eager mode it does nothing. While paddle.jit.to_static traces the forward, the program being
built is `paddle.static.default_main_program()`; the block records which top-level ops appeared
between its entry and exit (by `Operation.id()`, stable within a program). After capture,
`markers(graph)` finds the traced program whose ops line up with the Graph's and returns
{position of a top-level Graph op: stage}. Nested blocks: the innermost one wins."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import paddle

from ..errors import StrategyError
from ..graph import Graph

# NOTE: programs whose ops the capture reader skips (they become params, feeds and fetches).
_SKIPPED = frozenset({"builtin.parameter", "pd_op.data", "pd_op.feed", "pd_op.fetch"})
_KEEP_PROGRAMS = 16


@dataclass
class _Record:
    program: Any  # the paddle static Program being traced
    stage: int
    op_ids: list[int]


_RECORDS: list[_Record] = []


class stage:  # noqa: N801  (used as `with px.stage(2):`, like a function)
    """Ops built inside `with px.stage(k):` run on pipeline stage k."""

    def __init__(self, k: int):
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise StrategyError(f"px.stage(k) takes a stage number k >= 0, got {k!r}.")
        self.k = k
        self._program = None

    def __enter__(self):
        if paddle.in_dynamic_mode():
            return self
        self._program = paddle.static.default_main_program()
        self._before = {op.id() for op in self._program.global_block().ops}
        return self

    def __exit__(self, *exc):
        if self._program is None or exc[0] is not None:
            return False
        new = [op.id() for op in self._program.global_block().ops if op.id() not in self._before]
        _RECORDS.append(_Record(self._program, self.k, new))
        _forget_old_programs()
        return False


def _forget_old_programs():
    programs = []
    for r in reversed(_RECORDS):
        if all(r.program is not p for p in programs):
            programs.append(r.program)
    old = programs[_KEEP_PROGRAMS:]
    _RECORDS[:] = [r for r in _RECORDS if all(r.program is not p for p in old)]


def markers(graph: Graph) -> dict[int, int]:
    """{index into graph.block.ops: stage} from the px.stage blocks seen while tracing this Graph's
    program; empty when the model code has none."""
    names = [op.name for op in graph.block.ops]
    seen: list = []
    for rec in reversed(_RECORDS):
        if any(rec.program is p for p in seen):
            continue
        seen.append(rec.program)
        ids = [op.id() for op in rec.program.global_block().ops if op.name() not in _SKIPPED]
        kinds = [op.name() for op in rec.program.global_block().ops if op.name() not in _SKIPPED]
        if kinds != names:
            continue
        position = {op_id: i for i, op_id in enumerate(ids)}
        out: dict[int, int] = {}
        # NOTE: records are appended as blocks exit, so an inner block's ops are claimed first.
        for r in _RECORDS:
            if r.program is rec.program:
                for op_id in r.op_ids:
                    if op_id in position:
                        out.setdefault(position[op_id], r.stage)
        return out
    return {}
