"""Context parallelism's attention as a ring: the rewrite that finds attention in a Graph.

Under Strategy(sequence=N) each device holds 1/N of the sequence. Attention is the one place a token
reads every other token; left to GSPMD, each device gathers the whole keys and values and keeps
[T/N, T] scores for the backward pass. A ring passes key/value blocks around the N devices instead,
with a running softmax, and the backward pass recomputes each block's scores: a device never holds
more than one [T/N, T/N] block of them (ops/ring_attention.py).

The pattern, as Paddle's eager attention writes it (PaddleFormers' Llama, Qwen2, ERNIE 4.5, GPT):
    scores = matmul(q, transpose(k, [0, 1, 3, 2]))    (or matmul(q, k, transpose_y=True))
    x      = epilogue(scores)                         (elementwise ops, each reading the previous value:
                                                       scale, the mask's add, a cast)
    p      = softmax(x, axis=-1)
    out    = matmul(p, v)
Each intermediate value must have that one reader (a model that returns its attention weights keeps
its attention as captured). The chain becomes one `paddle_xla.ring_attention` op whose sub-block holds
the epilogue ops, so each block of scores goes through the model's own epilogue (its mask, scaling and
casts, whatever they are). Paddle-free."""
from __future__ import annotations

import dataclasses
from collections import Counter

from ..graph import Block, Graph, Op
from ..graph_patterns import SWAP_LAST_TWO, unrepeated_heads

EPILOGUE_OPS = frozenset({"pd_op.scale", "pd_op.add", "pd_op.cast", "pd_op.multiply", "pd_op.divide",
                          "pd_op.subtract"})


def rewrite(graph: Graph, *, axis: str, size: int, mesh) -> Graph:
    """The graph with each attention it finds as one ring attention over mesh axis `axis` of `size`."""
    ops = list(graph.block.ops)
    readers = Counter(v for op in graph.block.walk() for v in op.inputs if v is not None)
    # NOTE: a value the program returns or writes back has a reader outside the block too
    readers.update([f.value for f in graph.fetches] + [v for _, v in graph.buffer_updates])
    producer = {v: i for i, op in enumerate(ops) for v in op.outputs}
    fused, dropped = {}, set()
    for i, op in enumerate(ops):
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
    scores: int                 # the value the epilogue starts from
    epilogue: list[Op]
    chain: set[int]             # positions of the ops the ring replaces (not the final matmul's own)

    def grouped(self, op_of: dict) -> "_Found":
        """Grouped-query attention: the keys and values before the model repeats each head for its group of
        query heads, when both are repeated so (the ring passes 1/group of the bytes round)."""
        k, v = unrepeated_heads(self.k, op_of), unrepeated_heads(self.v, op_of)
        return self if k is None or v is None else dataclasses.replace(self, k=k, v=v)

    def op(self, final: Op, *, axis, size, mesh) -> Op:
        made = {v for op in self.epilogue for v in op.outputs} | {self.scores}
        outer = sorted({v for op in self.epilogue for v in op.inputs if v is not None and v not in made})
        last = self.epilogue[-1].outputs[0] if self.epilogue else self.scores
        return Op("paddle_xla.ring_attention", (self.q, self.k, self.v, *outer), final.outputs,
                  attrs={"axis": axis, "size": size, "mesh": mesh, "scores": self.scores, "epilogue_out": last},
                  scope=final.scope, source=final.source, blocks=(Block((self.scores,), tuple(self.epilogue)),),
                  index=final.index)


def _attention(i: int, ops: list[Op], producer: dict, readers: Counter) -> _Found | None:
    """The attention whose last product is ops[i], or None."""
    out = ops[i]
    if out.name != "pd_op.matmul" or out.attrs.get("transpose_x") or out.attrs.get("transpose_y"):
        return None
    p, v = out.inputs[:2]
    soft = _source(p, producer, readers)
    if soft is None or ops[soft].name != "pd_op.softmax" or ops[soft].attrs.get("axis") not in (-1, 3):
        return None
    chain, epilogue = {soft}, []
    x = ops[soft].inputs[0]
    j = _source(x, producer, readers)
    while j is not None and ops[j].name in EPILOGUE_OPS:
        epilogue.insert(0, ops[j])
        chain.add(j)
        x = _upstream(ops[j], ops, producer, readers)
        j = None if x is None else _source(x, producer, readers)
    if j is None or ops[j].name != "pd_op.matmul" or ops[j].attrs.get("transpose_x"):
        return None
    q, k = ops[j].inputs[:2]
    chain.add(j)
    if not ops[j].attrs.get("transpose_y"):
        t = _source(k, producer, readers)
        if t is None or ops[t].name != "pd_op.transpose" or list(ops[t].attrs.get("perm", ())) != SWAP_LAST_TWO:
            return None
        chain.add(t)
        k = ops[t].inputs[0]
    return _Found(q, k, v, x, epilogue, chain)


def _upstream(op: Op, ops: list[Op], producer: dict, readers: Counter) -> int | None:
    """The operand of an epilogue op that carries the scores: the one whose single-reader chain of epilogue
    ops reaches a matmul (a mask built by its own elementwise ops, `(1 - m) * -1e4`, reaches none)."""
    return next((v for v in op.inputs if v is not None and _reaches_matmul(v, ops, producer, readers)), None)


def _reaches_matmul(value: int, ops: list[Op], producer: dict, readers: Counter, depth: int = 8) -> bool:
    j = _source(value, producer, readers)
    if j is None or depth == 0:
        return False
    if ops[j].name == "pd_op.matmul":
        return True
    return ops[j].name in EPILOGUE_OPS and any(
        v is not None and _reaches_matmul(v, ops, producer, readers, depth - 1) for v in ops[j].inputs)


def _source(value: int, producer: dict, readers: Counter) -> int | None:
    """The position of the op producing `value`, when the value has exactly one reader."""
    if readers[value] != 1 or value not in producer:
        return None
    return producer[value]
