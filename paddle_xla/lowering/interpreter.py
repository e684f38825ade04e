"""The Graph interpreter: runs a Graph's ops on JAX values while jax traces them, each op as one
LoweringPolicy says (precision, kernel forms for the target, layouts), and the coverage check that
finds every op it cannot run before anything is traced. Paddle-free."""

from __future__ import annotations

import copy
import functools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp

from .. import ops as _every_lowering  # noqa: F401  (importing the package registers them all)
from ..errors import CheckFailedError, LoweringError
from ..graph import Block, Graph, Op
from ..ops.data_dependent import refusal
from ..ops.registry import REGISTRY, properties
from . import kernels
from .channels_last import Tracker
from .half import HALF, cast_operands
from .int8 import Int8Weight
from .policy import LoweringPolicy

# ---- coverage -------------------------------------------------------------------------------
NO_LOWERING = "no lowering"


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
        return sorted({p.op for p in self.problems if p.reason.startswith(NO_LOWERING)})

    def describe_missing(self) -> str:
        names = sorted({p.op for p in self.problems})
        head = (
            f"{len(names)} op type(s) cannot be lowered to XLA ({len(self.problems)} place(s) in the "
            f"program): {', '.join(names)}"
        )
        body = "\n".join(p.line() for p in self.problems)
        tail = (
            "\nEvery op paddle_xla lowers is listed by paddle_xla.supported_ops(); "
            "rewrite these calls with supported ones, or file an issue naming the op."
        )
        return f"{head}\n{body}{tail}"

    def describe(self) -> str:
        total = sum(self.counts.values())
        lines = [
            f"{total} ops, {len(self.counts)} op types; "
            f"{len(self.counts) - len({p.op for p in self.problems})} supported"
        ]
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
            report.problems.append(Problem(op.name, op.scope, op.source, refusal(op.name) or NO_LOWERING))
            continue
        for reason in entry.attr_problems(op.attrs):
            report.problems.append(Problem(op.name, op.scope, op.source, reason))
    return report


def draws_random(graph: Graph) -> bool:
    """Whether any op of the Graph draws random numbers (dropout, sampling)."""
    return any(_draws(op) for op in graph.ops())


def _draws(op: Op) -> bool:
    # NOTE: an op declares `draws_unless` for an attribute that makes it draw nothing: an inference
    # program's dropout (is_test) passes values through; a fresh key per call for it cost MobileNetV3
    # ~0.9 ms of its 14. (Read from the op's own properties: an in-place twin has them only if declared.)
    unless = properties(op.name).draws_unless
    if unless is not None and op.attrs.get(unless):
        return False
    return getattr(resolve(op.name), "random", False)


# ---- the environment a program starts from ---------------------------------------------------------
def bind(graph: Graph, weights: Mapping[str, Any], feeds: Mapping[str, Any], partial: bool = False) -> dict:
    """{value id: array} for the Graph's persistables and feeds (`partial`: those given only, as a
    pipeline stage has them)."""
    env: dict[int, Any] = {}
    for p in graph.params:
        if not partial or p.name in weights:
            w = weights[p.name]
            # NOTE: a weight held as weight-only int8 (lowering/int8.py) stays a pair for its matmul
            env[p.value] = Int8Weight(*map(jnp.asarray, w)) if isinstance(w, Int8Weight) else jnp.asarray(w)
    for f in graph.feeds:
        if not partial or f.name in feeds:
            # NOTE: feeds are data, never trace-time constants, even when given as NumPy arrays:
            # lowerings keep NumPy inputs static (shape arithmetic) and would fold them otherwise.
            env[f.value] = jnp.asarray(feeds[f.name])
    return env


# ---- the interpreter ----------------------------------------------------------------------------
@dataclass(frozen=True)
class GraphPlan:
    """What a policy decides for one Graph (lower.plan): the value ids it applies to."""

    nhwc_filters: frozenset[int] | None = None  # convolutions that run channels-last (None: none)
    hwio_filters: frozenset[int] = frozenset()  # filters that arrive as HWIO
    nk_weights: frozenset[int] = frozenset()  # matmul weights that arrive as [N, K]


class Interpreter:
    """Runs Blocks of a Graph on JAX values. Control-flow lowerings call back into `run_block`."""

    def __init__(
        self,
        key,
        policy: LoweringPolicy = LoweringPolicy(),
        plan: GraphPlan = GraphPlan(),
        collect_checks: bool = False,
    ):
        self.key = key
        self.policy = policy
        self.collect_checks = collect_checks
        self.checks: list[tuple[Op, Any]] = []  # the top-level block's asserts, in program order
        self.depth = 0
        self.half = HALF.get(policy.precision)
        self.kernels = kernels.KernelContext(policy, self.half, plan.hwio_filters, plan.nk_weights)
        self.layout = Tracker(plan.nhwc_filters) if plan.nhwc_filters is not None else None

    def run_block(self, block: Block, env: dict[int, Any]) -> dict[int, Any]:
        self.depth += 1
        try:
            for op in block.ops:
                args = [_read(env, i, op) for i in op.inputs]
                results = self.apply(op, args, env)
                for vid, val in zip(op.outputs, results):
                    env[vid] = val
        finally:
            self.depth -= 1
        if self.layout is not None:
            self.layout.release(env)
        return env

    def check(self, op: Op, cond) -> None:
        """A condition the program asserts (pd_op.assert). Known while tracing, it is checked now. Traced, at
        the top level of a program whose runtime reads its outputs for them (collect_checks), it becomes an
        output flag: a bool, nearly free. Anywhere else a host callback raises when it is false (~0.1 ms a
        call on CPU, measured; and a program with one cannot be exported)."""
        if isinstance(cond, bool):
            if not cond:
                raise CheckFailedError(check_message(op))
            cond = jnp.bool_(True)
        if self.collect_checks and self.depth == 1:
            self.checks.append((op, cond))
            return
        jax.debug.callback(functools.partial(_raise_if_false, check_message(op)), cond)

    def cast_operands(self, op: Op, args) -> list:
        """The operands as this policy's precision hands them to `op` (Paddle AMP O1)."""
        return args if self.half is None else cast_operands(op.name, args, self.half)

    def apply(self, op: Op, args, env):
        entry = resolve(op.name)
        nhwc = False
        if self.layout is not None:
            op, args, nhwc = self.layout.enter(op, args)
        kwargs = entry.kwargs(op.attrs)
        try:
            if entry.kind == "random":
                out = entry.fn(self.op_key(op), *self.cast_operands(op, args), **kwargs)
            elif entry.kind == "control":
                out = entry.fn(self, op, env, *args, **kwargs)
            else:
                kernel = kernels.choose(op, args, kwargs, self.kernels)
                if kernel is None or kernel.cast:
                    args = self.cast_operands(op, args)
                out = (entry.fn if kernel is None else kernel.fn)(*args, **kwargs)
        except LoweringError:
            raise
        except Exception as e:
            raise LoweringError(f"Lowering {op.name}{_where(op)} failed: {type(e).__name__}: {e}{_source(op)}") from e
        out = tuple(out) if isinstance(out, tuple) else (out,)
        if nhwc and self.layout is not None:
            self.layout.hold(op.outputs[0])
        return out + (None,) * (len(op.outputs) - len(out))

    def op_key(self, op: Op):
        # NOTE: keyed by the op's fixed position, so a run is reproducible from its seed.
        return jax.random.fold_in(self.key, op.index)

    def with_key(self, key) -> Interpreter:
        """This interpreter drawing from `key`: a loop body's random ops get a fresh key per iteration."""
        child = copy.copy(self)
        child.key = key
        return child


CHECK_MARK = "paddle_xla check failed: "


def check_message(op: Op) -> str:
    return f"Paddle's assert at {op.source or '(no source line)'} failed: its condition is false for these inputs."


def _raise_if_false(message: str, cond) -> None:
    if not bool(cond):
        raise CheckFailedError(CHECK_MARK + message)


def raise_failed_check(error: Exception) -> None:
    """Re-raise a JAX runtime error that a host-side check raised as the CheckFailedError it was."""
    text = str(error)
    if CHECK_MARK in text:
        message = text.split(CHECK_MARK, 1)[1].splitlines()[0]
        raise CheckFailedError(message) from None


def fail_on_false_flags(flags, messages) -> None:
    """Raise CheckFailedError for the first false flag of lower(..., checks=True) (reading them syncs)."""
    for flag, message in zip(flags, messages):
        if not bool(flag):
            raise CheckFailedError(message)


def _read(env: Mapping[int, Any], value: int | None, op: Op):
    if value is None:
        return None
    try:
        return env[value]
    except KeyError:
        raise LoweringError(
            f"Lowering {op.name}{_where(op)} failed: it reads value %{value}, which no op before "
            f"it defines (a capture error; please file an issue with this message){_source(op)}"
        ) from None


def _where(op: Op) -> str:
    return f" (layer {op.scope})" if op.scope else ""


def _source(op: Op) -> str:
    return f"\n  at {op.source}" if op.source else ""
