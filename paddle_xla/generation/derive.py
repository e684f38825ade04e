"""A KV cache derived from a plain decoder's forward, for a model that has no cache API.

The model is captured once, `forward(input_ids [B, T]) -> logits [B, T, V]`, with T symbolic: then
every position-wise op (embeddings, norms, linear layers, reshapes that read T from the input's
shape) computes on whatever length it is given. Of a causal decoder's ops, only three kinds care
which positions they see, and those are rewritten:

- the *attention matmuls*, the matmuls whose two operands both come from the tokens (a linear
  layer's other operand is a weight). Their second operand, keys for `q @ k^T` (transpose_y) and
  values for `att @ v`, is what a later position reads of earlier ones: it is the cache. In the decode
  step it is the cache entry followed by this token's own ([B, H, S + 1, D], a concatenation along the
  slots, as a cache class writes it, so the attention's sums run in a fixed order: gqa_rewrite.py);
- the scores `q @ k^T` get the slot mask (padding and empty slots at the lowest value), since the
  model's own causal mask, built from T = 1, masks nothing;
- `arange` over the input's length (positions for learned or rotary embeddings) gives the true
  positions instead of 0..T-1.

The derived programs have the interface capture/causal_lm.py gives PaddleFormers' models (see
batch_engine.py's programs), so the same BatchEngine runs both. The rewrite is checked, not trusted: api/generator.py
compares a derived prefill plus decode steps with the forward itself before generating, so a model
that mixes positions some other way (a cumsum or a convolution over time) is refused, not guessed at.
Paddle-free.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .. import x64
from ..errors import GenerationError
from ..graph import Block, Graph, Op, Tensor
from ..lowering.policy import LoweringPolicy
from .batch_engine import program
from .slots import prompt_positions

INPUT = "input_ids"


def _flow(graph: Graph) -> tuple[set[int], set[int]]:
    """(values computed from the tokens, values computed from the input's shape only)."""
    feed = {f.value for f in graph.feeds if f.name == INPUT}
    data, shaped = set(feed), set[int]()
    for op in graph.block.ops:
        ins = {v for v in op.inputs if v is not None}
        if op.name == "pd_op.shape" or op.name == "pd_op.shape64":
            if ins & (data | shaped):
                shaped.update(op.outputs)
        elif ins & data:
            data.update(op.outputs)
        elif ins & shaped:
            shaped.update(op.outputs)
    return data, shaped


def attention_matmuls(graph: Graph) -> list[Op]:
    data, _ = _flow(graph)
    return [op for op in graph.block.ops if op.name == "pd_op.matmul" and all(v in data for v in op.inputs[:2])]


def position_aranges(graph: Graph) -> list[Op]:
    _, shaped = _flow(graph)
    return [op for op in graph.block.ops if op.name == "pd_op.arange" and any(v in shaped for v in op.inputs)]


def check_derivable(graph: Graph) -> list[Op]:
    """The attention matmuls, after refusing a program this rewrite cannot take (with the reason)."""
    names = [f.name for f in graph.feeds]
    if names != [INPUT] or len(graph.fetches) != 1:
        raise GenerationError(
            f"a model without a cache API must take input_ids alone and return logits; this one "
            f"takes {names} and returns {len(graph.fetches)} outputs"
        )
    flow_ops = [op.name for op in graph.block.ops if op.blocks]
    if flow_ops:
        raise GenerationError(
            f"the forward has control flow ({sorted(set(flow_ops))}); paddle_xla derives a KV cache "
            "only from a straight-line decoder"
        )
    matmuls = attention_matmuls(graph)
    if not matmuls:
        raise GenerationError(
            "the forward has no attention (no matmul of two token-dependent operands), so there is no cache to derive"
        )
    scores = [m for m in matmuls if m.attrs.get("transpose_y")]
    if len(scores) * 2 != len(matmuls) or any(m.attrs.get("transpose_x") for m in matmuls):
        raise GenerationError(
            f"paddle_xla derives a cache from attention written as matmul(q, k, transpose_y=True) "
            f"then matmul(weights, v); this forward's {len(matmuls)} token-by-token matmuls do not "
            "pair up so"
        )
    return matmuls


class _Rewriter:
    """Builds a derived program: the forward's ops with the cache ops inserted, values renamed after them."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.ids = itertools.count(max(graph.value_ids()) + 1)
        self.rename: dict[int, int] = {}
        self.ops: list[Op] = []

    def new(self) -> int:
        return next(self.ids)

    def read(self, v):
        return self.rename.get(v, v) if v is not None else None

    def add(self, name: str, inputs, attrs=None, like: Op | None = None) -> int:
        out = self.new()
        self.ops.append(
            Op(
                name,
                tuple(inputs),
                (out,),
                attrs or {},
                scope=like.scope if like else "",
                source=like.source if like else "",
                index=len(self.ops),
            )
        )
        return out

    def copy(self, op: Op, inputs) -> None:
        self.ops.append(dataclasses.replace(op, inputs=tuple(inputs), index=op.index))


def derive(graph: Graph, batch: int, length: int, slots: int | None) -> Graph:
    """The prefill for prompts of `length` (slots=None), or the decode step over `slots` cache slots."""
    matmuls = check_derivable(graph)
    step = slots is not None
    entry = {m.index: i for i, m in enumerate(matmuls)}
    aranges = {op.index for op in position_aranges(graph)}
    r = _Rewriter(graph)
    ids = next(f for f in graph.feeds if f.name == INPUT)
    width = 1 if step else length
    mask, pos = r.new(), r.new()
    feeds = [
        Tensor(INPUT, ids.value, (batch, width), ids.dtype),
        Tensor("attention_mask", mask, (batch, slots + 1 if slots is not None else length), "int64"),
        Tensor("position_ids", pos, (batch, width), "int64"),
    ]
    if slots is not None:
        past = r.new()
        feeds.append(Tensor("past", past, (len(matmuls), batch, -1, slots, -1), "float32"))
    # NOTE: a step's cache is appended to an attention operand right where the operand is made, as a cache
    # class does: the values' concatenation then comes before the softmax, which reads its parts (gqa_rewrite)
    operands: dict[int | None, list[int]] = {}
    for m in matmuls:
        operands.setdefault(m.inputs[1], []).append(entry[m.index])
    appended: dict[int, int] = {}
    cached = []
    for op in graph.block.ops:
        inputs = [r.read(v) for v in op.inputs]
        if op.index in entry:
            if step:
                inputs[1] = appended[entry[op.index]]
            cached.append(inputs[1])
        r.copy(op, inputs)
        if op.index in entry and op.attrs.get("transpose_y"):
            r.rename[op.outputs[0]] = r.add("paddle_xla.mask_keys", [op.outputs[0], mask], {}, op)
        if op.index in aranges:
            r.rename[op.outputs[0]] = r.add("paddle_xla.positions", [op.outputs[0], pos], {}, op)
        for v in op.outputs if step else ():
            for e in operands.get(v, ()):
                appended[e] = _after_cache(r, r.read(v), past, e, op)
    logits = r.add("paddle_xla.last_position", [r.read(graph.fetches[0].value)])
    kv = r.add("paddle_xla.stack_cache", cached, {"new_only": step})
    fetches = (
        Tensor("logits", logits, (batch, -1), graph.fetches[0].dtype),
        Tensor(
            "cache", kv, (len(matmuls), batch, -1, -1, -1) if not step else (len(matmuls), batch, -1, -1), "float32"
        ),
    )
    return dataclasses.replace(
        graph,
        block=Block(graph.block.args, tuple(r.ops)),
        feeds=tuple(feeds),
        fetches=fetches,
        meta={**graph.meta, "derived": "decode" if step else "prefill"},
    )


def _after_cache(r: _Rewriter, new: int, past: int, entry: int, like: Op) -> int:
    """The attention operand `new` [B, H, 1, D] after cache entry `entry` of `past`: concat([cached, new],
    axis=-2), written as a model's own cache class writes it, so that the attention reads the two parts where
    they lie and sums over the slots in a fixed order (gqa_rewrite.py, ops/grouped_attention.py): a row's
    numbers then do not depend on how many cache slots its step carries."""
    cached = r.add("paddle_xla.cache_entry", [past, new], {"entry": entry}, like)
    parts = r.add("builtin.combine", [cached, new], {}, like)
    axis = r.add("pd_op.full", [], {"shape": [1], "value": -2.0, "dtype": "int32"}, like)
    return r.add("pd_op.concat", [parts, axis], {}, like)


def one_row_step(graph: Graph) -> Graph:
    """The decode step of one row over any number of cache slots (symbolic): a derived cache's rows share
    their positions within a call, so generate and a paged engine run this step once per row (per_row)."""
    step = derive(graph, 1, 1, 16)
    ids, mask, pos, past = step.feeds
    feeds = (
        ids,
        dataclasses.replace(mask, shape=(1, -1)),
        pos,
        dataclasses.replace(past, shape=(past.shape[0], 1, -1, -1, -1)),
    )
    return dataclasses.replace(step, feeds=feeds)


def per_row(decode: Callable) -> Callable:
    """one_row_step's program as the step of R rows, each at its own position: decode(weights, ids [R, 1],
    mask [R, S + 1], positions [R, 1], past [2L, R, H, S, D]) -> (logits [R, V], new [2L, R, H, D]). vmap
    batches the rows' products into one, as a step of R rows computes them. px.Generator's
    generate and a server's paged engine both run a derived decode step so, and give a row the same numbers."""

    def one(weights, ids, mask, positions, past):
        logits, new = decode(weights, ids[None], mask[None], positions[None], past[:, None])
        return logits[0], new[:, 0]

    return jax.vmap(one, in_axes=(None, 0, 0, 0, 1), out_axes=(0, 1))


def check_against_forward(
    forward: Graph, prefill: Graph, step: Graph, weights, slots: int, vocab: int, seed: int = 0
) -> float:
    """Run the derived prefill and up to two decode steps (teacher-forced) and compare their logits with
    the forward's own on the whole sequence; refuse the derivation when they differ. Returns the largest
    difference, relative to the largest logit."""
    policy = LoweringPolicy()
    fwd, pre, stp = (program(g, policy) for g in (forward, prefill, step))
    batch, width = prefill.feeds[0].shape
    steps = min(2, slots - width)
    n = max(1, min(width, 5))
    rng = np.random.default_rng(seed)
    x = rng.integers(0, vocab, (batch, n + steps)).astype(np.int64)
    ids = np.zeros((batch, width), np.int64)
    mask = np.zeros((batch, width), np.int64)
    ids[:, width - n :], mask[:, width - n :] = x[:, :n], 1
    with x64.scope():
        want = np.asarray(fwd(weights, jnp.asarray(x, jnp.int64))[0], np.float64)
        logits, kv = pre(weights, ids, mask, prompt_positions(jnp.asarray(mask)))
        got = [np.asarray(logits, np.float64)]
        past = jnp.zeros(kv.shape[:3] + (slots,) + kv.shape[4:], jnp.float32).at[:, :, :, :width].set(kv)
        valid = np.zeros((batch, slots), np.int64)
        valid[:, :width] = mask
        for j in range(steps):
            step_mask = np.concatenate([valid, np.ones((batch, 1), np.int64)], axis=1)  # + the step's own token
            logits, new = stp(weights, x[:, n + j : n + j + 1], step_mask, np.full((batch, 1), n + j, np.int64), past)
            got.append(np.asarray(logits, np.float64))
            past = past.at[:, :, :, width + j].set(new)
            valid[:, width + j] = 1
    expected = want[:, n - 1 : n + steps]
    moved = max(float(np.abs(g - expected[:, i]).max()) for i, g in enumerate(got)) / max(
        1.0, float(np.abs(want).max())
    )
    if not moved <= 1e-4:
        raise GenerationError(
            f"the KV cache derived from this model's forward does not reproduce it (logits differ by "
            f"{moved:.3g} of their scale): it mixes positions other than through attention matmuls "
            "(a cumsum, a convolution over time, a position computed otherwise than by arange), "
            "which paddle_xla does not derive; give the model a past_key_values cache API"
        )
    return moved
