"""Graph -> one pure JAX function  f(params, buffers, feeds, key) -> (fetches, new_buffers).

The Graph is interpreted op by op while jax traces it, so the traced program is exactly the
Paddle program, and XLA sees one function to fuse and schedule.
"""
from __future__ import annotations

import copy

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp

# NOTE: Paddle computes with int64 indices and float64 tensors where the user asks for them; without
# x64 JAX would silently narrow both and the numbers would differ from Paddle's.
jax.config.update("jax_enable_x64", True)

from . import ops as _ops  # noqa: E402  (registers every lowering)
from .errors import LoweringError, UnsupportedOpsError  # noqa: E402
from .graph import Block, Graph, Op  # noqa: E402
from .ops.registry import REGISTRY  # noqa: E402

_ = _ops


# ---- coverage -------------------------------------------------------------------------------
@dataclass
class Problem:
    op: str
    scope: str
    source: str
    reason: str

    def line(self) -> str:
        where = self.source or "(no user source line)"
        scope = f" in layer {self.scope}" if self.scope else ""
        return f"  {self.op}{scope}: {self.reason}\n      at {where}"


@dataclass
class CoverageReport:
    counts: Counter = field(default_factory=Counter)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def unsupported(self) -> list[str]:
        return sorted({p.op for p in self.problems if p.reason == "no lowering"})

    def describe_missing(self) -> str:
        names = sorted({p.op for p in self.problems})
        head = (f"{len(names)} op type(s) cannot be lowered to XLA ({len(self.problems)} place(s) in the "
                f"program): {', '.join(names)}")
        body = "\n".join(p.line() for p in self.problems)
        tail = ("\nEvery op paddle_xla lowers is listed by paddle_xla.supported_ops(); "
                "rewrite these calls with supported ones, or file an issue naming the op.")
        return f"{head}\n{body}{tail}"

    def describe(self) -> str:
        total = sum(self.counts.values())
        lines = [f"{total} ops, {len(self.counts)} op types; "
                 f"{len(self.counts) - len({p.op for p in self.problems})} supported"]
        for name, n in sorted(self.counts.items()):
            mark = "MISSING" if any(p.op == name for p in self.problems) else "ok"
            lines.append(f"  {mark:7s} {name} x{n}")
        if self.problems:
            lines.append(self.describe_missing())
        return "\n".join(lines)


def resolve(name: str):
    """The lowering of an op; an in-place variant (relu_) uses its functional twin (relu), since
    capture has already made later readers see the in-place result."""
    entry = REGISTRY.get(name)
    if entry is None and name.endswith("_"):
        entry = REGISTRY.get(name[:-1])
    return entry


def check_graph(graph: Graph) -> CoverageReport:
    """Find every op with no lowering or with attributes its lowering does not expect."""
    report = CoverageReport()
    for op in graph.ops():
        report.counts[op.name] += 1
        entry = resolve(op.name)
        if entry is None:
            report.problems.append(Problem(op.name, op.scope, op.source, "no lowering"))
            continue
        for reason in entry.attr_problems(op.attrs):
            report.problems.append(Problem(op.name, op.scope, op.source, reason))
    return report


# ---- the interpreter --------------------------------------------------------------------------
class Interpreter:
    """Runs Blocks of a Graph on JAX values. Control-flow lowerings call back into `run_block`."""

    def __init__(self, key):
        self.key = key

    def run_block(self, block: Block, env: dict[int, Any]) -> dict[int, Any]:
        for op in block.ops:
            args = [env[i] if i is not None else None for i in op.inputs]
            results = self.apply(op, args, env)
            for vid, val in zip(op.outputs, results):
                env[vid] = val
        return env

    def cast_operands(self, op: Op, args) -> list:
        """The operands as this interpreter's precision policy hands them to `op` (as given here)."""
        return args

    def apply(self, op: Op, args, env):
        entry = resolve(op.name)
        kwargs = entry.kwargs(op.attrs)
        try:
            if entry.kind == "random":
                out = entry.fn(self.op_key(op), *args, **kwargs)
            elif entry.kind == "control":
                out = entry.fn(self, op, env, *args, **kwargs)
            else:
                out = entry.fn(*args, **kwargs)
        except LoweringError:
            raise
        except Exception as e:
            where = f" (layer {op.scope})" if op.scope else ""
            src = f"\n  at {op.source}" if op.source else ""
            raise LoweringError(f"Lowering {op.name}{where} failed: {type(e).__name__}: {e}{src}") from e
        out = tuple(out) if isinstance(out, tuple) else (out,)
        return out + (None,) * (len(op.outputs) - len(out))

    def op_key(self, op: Op):
        # NOTE: keyed by the op's fixed position, so a run is reproducible from its seed.
        return jax.random.fold_in(self.key, op.index)

    def with_key(self, key) -> "Interpreter":
        """This interpreter drawing from `key`: a loop body's random ops get a fresh key per iteration."""
        child = copy.copy(self)
        child.key = key
        return child


def lower(graph: Graph, interpreter: type[Interpreter] | None = None) -> Callable:
    """The Graph as a pure function f(params, buffers, feeds, key) -> (fetches, new_buffers),
    run by `interpreter` (default: Interpreter).

    params/buffers/feeds are dicts name -> array; fetches is a tuple in graph.fetches order;
    new_buffers holds the buffers the program writes (BatchNorm running statistics in train mode)."""
    report = check_graph(graph)
    if not report.ok:
        raise UnsupportedOpsError(report)

    def fn(params: Mapping, buffers: Mapping, feeds: Mapping, key=None):
        if key is None:
            key = jax.random.key(0)
        env: dict[int, Any] = {}
        for p in graph.params:
            env[p.value] = jnp.asarray(params[p.name] if p.name in params else buffers[p.name])
        for f in graph.feeds:
            # NOTE: feeds are data, never trace-time constants, even when given as NumPy arrays:
            # lowerings keep NumPy inputs static (shape arithmetic) and would fold them otherwise.
            env[f.value] = jnp.asarray(feeds[f.name])
        (interpreter or Interpreter)(key).run_block(graph.block, env)
        fetches = tuple(env[f.value] for f in graph.fetches)
        new_buffers = {name: env[vid] for name, vid in graph.buffer_updates}
        return fetches, new_buffers

    return fn
