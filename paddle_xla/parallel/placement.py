"""Which pipeline stage runs each op: from `px.stage` blocks, from rules on layer paths, or balanced
automatically ("auto"). Paddle-free.

Only ops that depend on weights get a stage. The others (masks, position ids, shape arithmetic, label
reshapes) compute from feeds and constants, so each stage that needs one recomputes it instead of
receiving it. Stages run in order, so an op's stage is never below the stage of a value it reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import StrategyError
from ..graph import Graph
from .graphs import DataFlow
from .rules import stages_of_weights


@dataclass
class Placement:
    stages: int
    stage_of: list[int | None]  # per top-level op; None: weight-free, recomputed where needed
    how: str  # "markers" | "rules" | "auto"
    cost: list[float] = field(default_factory=list)  # per op, for the printed plan
    plan: str = ""  # the printed plan

    def ops_of(self, s: int) -> list[int]:
        return [i for i, k in enumerate(self.stage_of) if k == s]


def _where(flow: DataFlow, i: int) -> str:
    op = flow.ops[i]
    scope = f" in layer {op.scope}" if op.scope else ""
    src = f" at {op.source}" if op.source else ""
    return f"{op.name}{scope}{src}"


def _propagate(flow: DataFlow, given: Mapping[int, int], strict: bool) -> list[int | None]:
    """Stages for every weighted op: the given one, else the highest stage among its inputs (0 when
    none). With `strict`, a given stage below an input's stage is an error (model-code markers)."""
    out: list[int | None] = []
    for i in range(len(flow.ops)):
        if not flow.weighted[i]:
            out.append(None)
            continue
        inputs = [s for s in (out[p] for p in flow.producers(i)) if s is not None]
        low = max(inputs, default=0)
        if i in given:
            if given[i] < low and strict:
                p = next(p for p in flow.producers(i) if out[p] == low)
                raise StrategyError(
                    f"Pipeline stages run in order, but {_where(flow, i)} is on stage {given[i]} and reads a value "
                    f"from stage {low} ({_where(flow, p)}). Move the px.stage({given[i]}) block before that "
                    f"code, or give it stage {low} or later."
                )
            out.append(max(given[i], low))
        else:
            out.append(low)
    return out


def from_markers(flow: DataFlow, stages: int, markers: Mapping[int, int]) -> Placement:
    bad = sorted({k for k in markers.values() if k >= stages})
    if bad:
        raise StrategyError(
            f"The model code uses px.stage({bad[0]}), but Strategy.stages={stages}; set "
            f"stages={max(bad) + 1} or renumber the px.stage blocks 0..{stages - 1}."
        )
    return Placement(stages, _propagate(flow, markers, strict=True), "markers")


def from_rules(flow: DataFlow, stages: int, rules: Mapping[str, int], keys: Mapping[str, str]) -> Placement:
    by_weight = stages_of_weights(rules, {n: _strip_wrapper(k) for n, k in keys.items() if n in flow.param_of.values()})
    given = {}
    for i in range(len(flow.ops)):
        ruled = [by_weight[n] for n in flow.params_read(i) if n in by_weight]
        if ruled:
            given[i] = max(ruled)
    return Placement(stages, _propagate(flow, given, strict=False), "rules")


def _strip_wrapper(key: str) -> str:
    # NOTE: train_step wraps the user's net as `net` beside the loss; rules name the user's own paths.
    return key[4:] if key.startswith("net.") else key


def auto(flow: DataFlow, stages: int, cost: Sequence[float], cut_bytes: Sequence[float] | None = None) -> Placement:
    """Contiguous runs of weighted ops with the largest stage cost as small as it can be; each cut
    then moves to the nearby position (within 10% of that cost) that sends the fewest bytes."""
    idx = [i for i in range(len(flow.ops)) if flow.weighted[i]]
    if len(idx) < stages:
        raise StrategyError(
            f"The program has {len(idx)} ops that use weights, fewer than stages={stages}; "
            f"lower stages to at most {len(idx)}."
        )
    c = np.array([max(float(cost[i]), 1e-9) for i in idx])
    cuts = _balanced_cuts(c, stages)
    if cut_bytes is not None:
        cuts = _cheaper_cuts(c, cuts, np.array([cut_bytes[i] for i in idx]))
    stage_of: list[int | None] = [None] * len(flow.ops)
    bounds = [0, *cuts, len(idx)]
    for s in range(stages):
        for j in range(bounds[s], bounds[s + 1]):
            stage_of[idx[j]] = s
    given = {i: st for i in idx if (st := stage_of[i]) is not None}  # NOTE: every index in idx has its stage
    return Placement(stages, _propagate(flow, given, strict=False), "auto", list(cost))


def _balanced_cuts(c: np.ndarray, stages: int) -> list[int]:
    """Cut positions (into the op list) minimising the largest group sum: DP over prefix sums."""
    n = len(c)
    pre = np.concatenate([[0.0], np.cumsum(c)])
    best = pre[1:].copy()  # best[j]: max group cost of ops[:j+1] in 1 group
    choice = [np.zeros(n, int)]
    for _ in range(1, stages):
        nxt = np.full(n, np.inf)
        arg = np.zeros(n, int)
        for j in range(n):
            i = np.arange(j)  # previous groups end at i, this one is ops[i+1:j+1]
            if not len(i):
                continue
            v = np.maximum(best[i], pre[j + 1] - pre[i + 1])
            k = int(np.argmin(v))
            nxt[j], arg[j] = v[k], i[k]
        best = nxt
        choice.append(arg)
    cuts, j = [], n - 1
    for s in range(stages - 1, 0, -1):
        j = int(choice[s][j])
        cuts.append(j + 1)
    return sorted(cuts)


def _cheaper_cuts(c: np.ndarray, cuts: list[int], send: np.ndarray) -> list[int]:
    pre = np.concatenate([[0.0], np.cumsum(c)])
    bounds = [0, *cuts, len(c)]
    limit = max(pre[bounds[k + 1]] - pre[bounds[k]] for k in range(len(bounds) - 1)) * 1.10
    for k in range(1, len(bounds) - 1):
        lo, hi = bounds[k - 1] + 1, bounds[k + 1] - 1
        ok = [
            p
            for p in range(lo, hi + 1)
            if pre[p] - pre[bounds[k - 1]] <= limit and pre[bounds[k + 1]] - pre[p] <= limit
        ]
        if ok:
            bounds[k] = min(ok, key=lambda p: (send[p - 1], abs(p - bounds[k])))
    return bounds[1:-1]


def check(flow: DataFlow, placement: Placement) -> None:
    """Every stage needs ops; a buffer (running statistics) belongs to one stage."""
    empty = [s for s in range(placement.stages) if not placement.ops_of(s)]
    if empty:
        counts = [len(placement.ops_of(s)) for s in range(placement.stages)]
        hint = {
            "markers": "add a px.stage(k) block for each stage k",
            "rules": "add a rule that sends some layers to each stage",
            "auto": "lower stages",
        }[placement.how]
        raise StrategyError(
            f"Pipeline stage(s) {empty} have no ops (ops per stage: {counts}); {hint}, or "
            f"set stages={placement.stages - len(empty)}."
        )
    buffers = {p.name for p in flow.graph.buffers()}
    seen: dict[str, int] = {}
    for i, s in enumerate(placement.stage_of):
        for name in flow.params_read(i) & buffers:
            if s is not None and seen.setdefault(name, s) != s:
                raise StrategyError(
                    f"The buffer {name!r} is used on stages {seen[name]} and {s}; a buffer "
                    "(e.g. BatchNorm statistics) must stay on one stage. Put its layer's ops on "
                    "one stage."
                )


def place(
    graph: Graph,
    stages: int,
    placement,
    markers: Mapping[int, int],
    keys: Mapping[str, str],
    cost: Sequence[float],
    cut_bytes: Sequence[float] | None = None,
) -> Placement:
    """The stage of every op, by px.stage markers, rules, or balance ("auto", the default)."""
    flow = DataFlow(graph)
    if isinstance(placement, Mapping):
        if markers:
            raise StrategyError(
                "The model code has px.stage blocks and the Strategy has placement rules; use one of the two."
            )
        result = from_rules(flow, stages, placement, keys)
    elif markers and placement is None:
        result = from_markers(flow, stages, markers)
    else:
        result = auto(flow, stages, cost, cut_bytes)
    result.cost = list(cost)
    check(flow, result)
    return result
