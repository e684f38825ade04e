"""Context parallelism's attention as a ring: the rewrite that finds attention in a Graph.

Under Strategy(sequence=N) each device holds 1/N of the sequence. Attention is the one place a token
reads every other token; left to GSPMD, each device gathers the whole keys and values and keeps
[T/N, T] scores for the backward pass. A ring passes key/value blocks around the N devices instead,
with a running softmax, and the backward pass recomputes each block's scores: a device never holds
more than one [T/N, T/N] block of them (ops/ring_attention.py).

The pattern, as Paddle's eager attention writes it (PaddleFormers' Llama, Qwen2, ERNIE 4.5, GPT):
    scores = matmul(q, transpose(k, [0, 1, 3, 2]))    (or matmul(q, k, transpose_y=True))
    x      = epilogue(scores)                         (elementwise ops between the two, a DAG: scale, the
                                                       mask's add or where, a cast, a clamp)
    p      = softmax(x, axis=-1)
    out    = matmul(p, v)
Every value made on the way must be read only on the way (a model that returns its attention weights,
or reads its scaled scores elsewhere, keeps its attention as captured). The whole becomes one
`paddle_xla.ring_attention` op whose sub-block holds the epilogue ops, so each block of scores goes
through the model's own epilogue (its mask, scaling and casts, whatever they are). Paddle-free."""

from __future__ import annotations

import dataclasses
from collections import Counter

from ..graph import Block, Graph, Op
from ..graph.patterns import SWAP_LAST_TWO, unrepeated_heads

# NOTE: elementwise ops only: the ring runs them on one [T/N, T/N] block of scores at a time, with each
# operand's block (a mask's rows and columns) cut to match, which is exact for nothing else
EPILOGUE_OPS = frozenset(
    {
        "pd_op.scale",
        "pd_op.add",
        "pd_op.cast",
        "pd_op.multiply",
        "pd_op.divide",
        "pd_op.subtract",
        "pd_op.where",
        "pd_op.masked_fill",
        "pd_op.maximum",
        "pd_op.minimum",
        "pd_op.tanh",
        "pd_op.full_like",
    }
)


def rewrite(graph: Graph, *, axis: str, size: int, mesh) -> Graph:
    """The graph with each attention it finds as one ring attention over mesh axis `axis` of `size`."""
    ops = list(graph.block.ops)
    readers = graph.read_counts()
    producer = {v: i for i, op in enumerate(ops) for v in op.outputs}
    fused: dict = {}
    dropped: set[int] = set()
    for i in range(len(ops)):
        found = _attention(i, ops, producer, readers)
        if found is None or found.chain & dropped:
            continue
        found = found.grouped({v: ops[j] for v, j in producer.items()})
        fused[i] = found.op(ops[i], axis=axis, size=size, mesh=mesh)
        dropped |= found.chain
    if not fused:
        return graph
    kept = tuple(fused.get(i, op) for i, op in enumerate(ops) if i not in dropped or i in fused)
    return dataclasses.replace(graph, block=dataclasses.replace(graph.block, ops=kept))


@dataclasses.dataclass
class _Found:
    q: int
    k: int
    v: int
    scores: int  # the value the epilogue starts from
    epilogue: list[Op]
    chain: set[int]  # positions of the ops the ring replaces (not the final matmul's own)

    def grouped(self, op_of: dict) -> _Found:
        """Grouped-query attention: the keys and values before the model repeats each head for its group of
        query heads, when both are repeated so (the ring passes 1/group of the bytes round)."""
        k, v = unrepeated_heads(self.k, op_of), unrepeated_heads(self.v, op_of)
        return self if k is None or v is None else dataclasses.replace(self, k=k, v=v)

    def op(self, final: Op, *, axis, size, mesh) -> Op:
        made = {v for op in self.epilogue for v in op.outputs} | {self.scores}
        outer = sorted({v for op in self.epilogue for v in op.inputs if v is not None and v not in made})
        last = self.epilogue[-1].outputs[0] if self.epilogue else self.scores
        return Op(
            "paddle_xla.ring_attention",
            (self.q, self.k, self.v, *outer),
            final.outputs,
            attrs={"axis": axis, "size": size, "mesh": mesh, "scores": self.scores, "epilogue_out": last},
            scope=final.scope,
            source=final.source,
            blocks=(Block((self.scores,), tuple(self.epilogue)),),
            index=final.index,
        )


def _attention(i: int, ops: list[Op], producer: dict, readers: Counter) -> _Found | None:
    """The attention whose last product is ops[i], or None."""
    out = ops[i]
    if out.name != "pd_op.matmul" or out.attrs.get("transpose_x") or out.attrs.get("transpose_y"):
        return None
    p, v = out.inputs[:2]
    soft = _source(p, producer, readers)
    if soft is None or ops[soft].name != "pd_op.softmax" or ops[soft].attrs.get("axis") not in (-1, 3):
        return None
    x = ops[soft].inputs[0]
    found = _epilogue(x, ops, producer, readers)
    if found is None:
        return None
    j, epilogue = found
    q, k = ops[j].inputs[:2]
    chain = {soft, j} | {producer[o] for op in epilogue for o in op.outputs}
    if not ops[j].attrs.get("transpose_y"):
        t = _source(k, producer, readers)
        if t is None or ops[t].name != "pd_op.transpose" or list(ops[t].attrs.get("perm", ())) != SWAP_LAST_TWO:
            return None
        chain.add(t)
        k = ops[t].inputs[0]
    return _Found(q, k, v, ops[j].outputs[0], epilogue, chain)


def _epilogue(x: int, ops: list[Op], producer: dict, readers: Counter) -> tuple[int, list[Op]] | None:
    """(position of the scores matmul, the epilogue ops in program order) for the softmax input x: every
    elementwise op between one q @ k^T and x, or None when there is no such matmul, or more than one, or
    a value made on the way is read outside it (the ring would drop that reader's value). A DAG, not only
    a chain: paddle.where in a static program broadcasts its operands through full_like(scores) + adds."""
    if readers[x] != 1 or x not in producer:
        return None
    reach: dict[int, int | None] = {}  # value -> the scores matmul it descends from, or None

    def scores_of(value: int, depth: int = 0):
        if value in reach:
            return reach[value]
        reach[value] = None
        j = producer.get(value)
        if j is None or depth > 64:
            return None
        op = ops[j]
        if op.name == "pd_op.matmul" and not op.attrs.get("transpose_x"):
            reach[value] = j
        elif op.name in EPILOGUE_OPS:
            found = {scores_of(u, depth + 1) for u in op.inputs if u is not None} - {None}
            reach[value] = found.pop() if len(found) == 1 else (-1 if found else None)
        return reach[value]

    j = scores_of(x)
    if j is None or j < 0:
        return None
    inside = sorted({producer[v] for v, m in reach.items() if m == j and producer[v] != j})
    uses = Counter(u for pos in inside for u in ops[pos].inputs if u is not None)
    made = [o for pos in inside for o in ops[pos].outputs] + [ops[j].outputs[0]]
    if any(uses[o] != readers[o] for o in made if o != x):
        return None
    return j, [ops[pos] for pos in inside]


def _source(value: int, producer: dict, readers: Counter) -> int | None:
    """The position of the op producing `value`, when the value has exactly one reader."""
    if readers[value] != 1 or value not in producer:
        return None
    return producer[value]
