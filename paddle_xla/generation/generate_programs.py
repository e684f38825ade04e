"""The programs BatchEngine (px.Generator.generate, a generator artifact's generate) runs, made from the Graphs
a server's engines run, so that a prompt gets the same numbers from generate and from a server:

- "prefill_<bucket>" and "extend" (a prompt chunk): the batch-1 prefill and extend a server inserts one
  request with, run for each row in turn (batch_engine.rows_in_turn): XLA rounds a product by how many rows
  it multiplies;
- "decode": the batch's decode step; a plain decoder's is its one-row step run per row (derive.per_row),
  as a server's paged engine runs it (a derived program's rows share their positions).

px.Generator makes them from its captures, the exporter writes them as the artifact's executables, and a
loader that lowers the Graphs again makes them here. Paddle-free."""

from __future__ import annotations

from collections.abc import Callable

from ..graph import Graph
from ..lowering.policy import LoweringPolicy
from ..runtime.held import HeldWeights
from .batch_engine import program, rows_in_turn
from .derive import per_row


def generate_program(
    name: str, graph_of: Callable[[str], Graph], policy: LoweringPolicy, held: HeldWeights | None, one_length: bool
) -> Callable:
    """BatchEngine's program `name` ("decode", "prefill_<bucket>" or "extend") from the Graphs graph_of
    names "decode", "decode_any", "prefill1_<bucket>" and "extend1"."""
    if name.startswith("prefill_"):
        one = program(graph_of("prefill1_" + name.removeprefix("prefill_")), policy, held)
        return rows_in_turn(one, (0, 0, 0), (0, 1))
    if name == "extend":
        return rows_in_turn(program(graph_of("extend1"), policy, held), (0, 0, 0, 1), (0, 1))
    if name == "decode" and one_length:
        return per_row(program(graph_of("decode_any"), policy, held))
    return program(graph_of(name), policy, held)
