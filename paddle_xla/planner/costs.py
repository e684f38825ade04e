"""What a captured training program costs, measured without compiling: weight and optimizer-state
bytes per weight, forward FLOPs per sample, and the activations the backward pass keeps per sample
(JAX's own account of the residuals autodiff saves, from an abstract trace), for each precision and
recomputation the planner may choose. Paddle-free."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import jax
import numpy as np
from jax._src.ad_checkpoint import saved_residuals

from .. import x64
from ..graph import Graph
from ..lowering.lower import interpreter_factory
from ..lowering.policy import LoweringPolicy
from ..parallel.profile import op_flops, trace_values
from ..parallel.program import run, whole
from ..train import optim
from ..train.step import loss_value

STAND_IN = 2  # samples per traced micro-batch (and twice that, to tell per-sample from fixed costs)


@dataclass(frozen=True)
class Activations:
    per_sample: float  # bytes kept for the backward pass per sample of a micro-batch
    fixed: float  # bytes kept whatever the batch (half copies of the weights, constants)
    scores_per_sample: float = 0.0  # of per_sample, in [.., T, T] tensors (attention's scores; T a sequence)


@dataclass
class ModelCosts:
    graph: Graph
    weight_bytes: Mapping[str, int]  # trainable and buffer, fp32 as held
    trainable: frozenset[str]
    opt_bytes: Mapping[str, tuple[int, int]]  # weight -> (bytes shaped like it, scalar bytes)
    flops_per_sample: float  # forward
    feed_bytes_per_sample: float
    value_bytes_per_sample: Mapping[int, float]  # top-level value id -> bytes per sample
    acts: dict = field(default_factory=dict)  # (precision, remat) -> Activations
    experts: Mapping[str, float] = field(default_factory=dict)  # an MoE expert's weight -> the share a token runs

    @property
    def params(self) -> int:
        return sum(int(np.prod(p.shape)) for p in self.graph.params if p.name in self.trainable)

    @property
    def expert_params(self) -> int:
        return sum(int(np.prod(p.shape)) for p in self.graph.params if p.name in self.experts)

    @property
    def active_params(self) -> int:
        """The parameters one token computes with: an MoE layer's experts count by their top_k / num_experts."""
        return round(
            sum(
                int(np.prod(p.shape)) * self.experts.get(p.name, 1.0)
                for p in self.graph.params
                if p.name in self.trainable
            )
        )


def moe_experts(graph: Graph) -> dict[str, float]:
    """Each MoE op's expert weights (its operands after the router's weight and correction bias:
    ops/moe.py's sparse_moe) and the share of them a token runs, top_k / num_experts."""
    names = {p.value: p.name for p in graph.params}
    out = {}
    for op in graph.block.walk():
        if op.name == "paddle_xla.sparse_moe":
            lead = 3 if op.attrs["correction_bias"] else 2
            share = op.attrs["top_k"] / op.attrs["num_experts"]
            out.update({names[v]: share for v in op.inputs[lead:] if v in names})
    return out


@x64.enabled
def model_costs(graph: Graph, config: optim.OptimizerConfig) -> ModelCosts:
    shapes = {p.name: jax.ShapeDtypeStruct(tuple(p.shape), p.dtype) for p in graph.params}
    trainable = frozenset(p.name for p in graph.trainable())
    opt = jax.eval_shape(lambda ps: optim.init_state(config, ps), {n: shapes[n] for n in config.trainable()})
    opt_bytes = {
        n: (
            sum(_nbytes(x) for x in accs.values() if x.shape == shapes[n].shape),
            sum(_nbytes(x) for x in accs.values() if x.shape != shapes[n].shape),
        )
        for n, accs in opt.items()
    }
    feeds = _feeds(graph, STAND_IN)
    values = trace_values(graph, shapes, feeds)
    flops = sum(op_flops(op, values) for op in graph.block.ops) / STAND_IN
    return ModelCosts(
        graph,
        {n: _nbytes(s) for n, s in shapes.items()},
        trainable,
        opt_bytes,
        flops,
        sum(_nbytes(x) for x in feeds.values()) / STAND_IN,
        {v: info.nbytes / STAND_IN for v, info in values.items()},
        experts=moe_experts(graph),
    )


def activations(costs: ModelCosts, precision: str, remat: bool) -> Activations:
    key = (precision, remat)
    if key not in costs.acts:
        small, large = (_residual_bytes(costs.graph, precision, remat, b) for b in (STAND_IN, 2 * STAND_IN))
        per = (large[0] - small[0]) / STAND_IN
        costs.acts[key] = Activations(per, max(small[0] - per * STAND_IN, 0.0), (large[1] - small[1]) / STAND_IN)
    return costs.acts[key]


@x64.enabled
def _residual_bytes(graph: Graph, precision: str, remat: bool, batch: int) -> tuple[float, float]:
    """Bytes of the intermediates autodiff keeps for the backward pass of one micro-batch of `batch`, and
    of those, the bytes in [.., T, T] tensors, T a sequence length (the token inputs' dimension 1):
    attention's scores and probabilities, which a ring attention does not keep."""
    weights = {p.name: jax.ShapeDtypeStruct(tuple(p.shape), p.dtype) for p in graph.params}
    trainable = {p.name for p in graph.trainable()}
    make = interpreter_factory(graph, LoweringPolicy.live(precision))
    sub = whole(graph)

    def loss(params, buffers, feeds):
        outs, _ = run(
            graph, sub, {**buffers, **params}, feeds, (), jax.random.key(0), interpreter=make, remat_layers=remat
        )
        return loss_value(outs[0])

    params = {n: w for n, w in weights.items() if n in trainable}
    buffers = {n: w for n, w in weights.items() if n not in trainable}
    saved = [
        aval
        for aval, why in saved_residuals(loss, params, buffers, _feeds(graph, batch))
        if not why.startswith("from the argument")
    ]  # NOTE: weights and inputs are held anyway
    lengths = {f.shape[1] for f in graph.feeds if is_token_input(f) and f.shape[1] > 1}
    # NOTE: [.., heads, T, T]: 4-D or more with both last dimensions one length, so a [B, T, hidden] state
    # whose hidden size happens to equal T is not taken for scores
    scores = [a for a in saved if len(a.shape) >= 4 and a.shape[-1] == a.shape[-2] and a.shape[-1] in lengths]  # type: ignore[attr-defined]  # NOTE: ShapedArrays
    return float(sum(map(_nbytes, saved))), float(sum(map(_nbytes, scores)))


def is_token_input(feed) -> bool:
    """An integer input with a dimension 1: token ids (or labels, a mask) along a sequence. A float input
    [batch, n] is a sample's features, whose n the engine would split as readily, but splitting it carries
    no sequence through the model, so the planner never offers a split for it alone."""
    return len(feed.shape) >= 2 and isinstance(feed.shape[1], int) and np.issubdtype(np.dtype(feed.dtype), np.integer)


def _feeds(graph: Graph, batch: int) -> dict[str, jax.ShapeDtypeStruct]:
    out = {}
    for f in graph.feeds:
        shape = tuple(batch if (i == 0 and d < 0) else d for i, d in enumerate(f.shape))
        if any(d < 0 for d in shape):
            from ..errors import StrategyError

            raise StrategyError(
                f"The planner needs every dimension of input {f.name!r} but the batch: give its "
                f"InputSpec a concrete shape (got {list(f.shape)}, e.g. the sequence length)."
            )
        out[f.name] = jax.ShapeDtypeStruct(shape, f.dtype)
    return out


def _nbytes(x) -> int:
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return 0  # NOTE: a random key (dropout's), a few bytes
    return int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
