"""The LM head on every position: a prefill program's logits for each of its tokens, which a prompt's
log-probabilities need (OpenAI's `echo` with `logprobs`, what evaluation harnesses send).

A generator's prefills are captured as PaddleFormers' generate asks for them, `logits[:, -1]`
(capture/causal_lm.py), and last_logits.py moves that slice before the head. This rewrite drops the slice
instead, so the program fetches the head's whole [B, T, V] product. Only a fetched slice that drops axis 1
and whose input nothing else reads is dropped; a Graph without one is left as it is (None). Paddle-free."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..errors import GenerationError
from ..graph import Graph, Tensor
from .last_logits import takes_one_position

ALL_LOGITS = "all_logits:"  # NOTE: a program name's prefix: that program with every position's logits


def named(graph_of: Callable[[str], Graph], name: str) -> Graph:
    """graph_of(name), or for ALL_LOGITS + name that Graph with every position's logits (rewrite)."""
    if not name.startswith(ALL_LOGITS):
        return graph_of(name)
    base = name.removeprefix(ALL_LOGITS)
    graph = rewrite(graph_of(base))
    if graph is None:
        raise GenerationError(f"the {base} program does not fetch logits[:, -1], so its every position's are not known")
    return graph


def rewrite(graph: Graph) -> Graph | None:
    """The graph fetching every position's logits in place of the last one's, or None where its first fetch is
    not such a slice."""
    ops = list(graph.block.ops)
    logits = graph.fetches[0]
    at = next((i for i, op in enumerate(ops) if logits.value in op.outputs), None)
    if at is None or not takes_one_position(ops[at]) or len(ops[at].outputs) != 1:
        return None
    source = ops[at].inputs[0]
    if source is None or graph.read_counts()[source] != 1:
        return None
    batch, vocab = logits.shape
    whole = Tensor(logits.name, source, (batch, -1, vocab), logits.dtype)
    return dataclasses.replace(
        graph,
        block=dataclasses.replace(graph.block, ops=tuple(ops[:at] + ops[at + 1 :])),
        fetches=(whole,) + tuple(graph.fetches[1:]),
    )
