"""The interpreter a sequence-split step (Strategy(sequence=N)) runs its graph with.

The split reaches the program only through the feeds ([batch, sequence] split along the sequence,
sharded.py), and GSPMD carries it through every op that keeps the sequence dimension. A reshape that
merges the batch into the sequence ([B, T, V] -> [B * T, V], as a loss that flattens its logits does;
PaddleFormers' own losses do not) breaks it: the merged dimension's rows of one device are not one
contiguous block, a split GSPMD cannot express, so it gathers the whole tensor on every device. The loss
then runs unsplit, and at a long sequence the logits ([B * T, vocab] on each device, with their
log-softmax and gradient as large) outweigh everything the split saves (measured: the tiny Llama at
sequence 256 on 16 sequence devices held 21.0 MiB a device, 2.5x its 4-device layout, nearly all of it
the gathered logits). So where N divides B, the merged dimension is asked to stay split over the sequence
devices, each holding B * T / N rows (B / N whole samples): GSPMD moves the rows there (an all-to-all of
1/N of the tensor) instead of gathering all of them. A layout only: the values are those of one device."""

from __future__ import annotations

import functools

import jax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ..lowering.interpreter import Interpreter
from ..lowering.lower import InterpreterFactory

MERGES = frozenset({"pd_op.reshape", "pd_op.flatten"})


class MergedRowsStaySplit(Interpreter):
    def __init__(self, key, *, mesh: Mesh, lengths: frozenset, size: int, **kwargs):
        super().__init__(key, **kwargs)
        self.mesh, self.lengths, self.size = mesh, lengths, size

    def apply(self, op, args, env):
        out = super().apply(op, args, env)
        if op.name not in MERGES or not out or not self._merges_batch_and_sequence(args[0], out[0]):
            return out
        y = out[0]
        spec = P("sequence", *([P.UNCONSTRAINED] * (y.ndim - 1)))
        return [jax.lax.with_sharding_constraint(y, NamedSharding(self.mesh, spec)), *out[1:]]

    def _merges_batch_and_sequence(self, x, y) -> bool:
        """[B, T, ...] -> [B * T, ...] with T the dimension 1 of a feed the engine splits (the sequence) and B,
        the micro-batch, a multiple of the sequence devices.
        At B = 1 the split survives the reshape. Where the devices do not divide B (2 samples over 4 devices),
        GSPMD cannot move the rows with an all-to-all: it gathers them whole and slices them, and logs an
        "involuntary full rematerialization" warning, so those are left as they were (gathered)."""
        xs, ys = getattr(x, "shape", ()), getattr(y, "shape", ())
        return (
            len(xs) >= 2
            and len(ys) >= 1
            and xs[0] > 1
            and xs[0] % self.size == 0
            and xs[1] in self.lengths
            and ys[0] == xs[0] * xs[1]
        )


def merged_rows_stay_split(
    factory: InterpreterFactory, mesh: Mesh, lengths: frozenset, size: int
) -> InterpreterFactory:
    """`factory` (lower.interpreter_factory's partial) with batch-into-sequence merges kept split."""
    return functools.partial(MergedRowsStaySplit, mesh=mesh, lengths=lengths, size=size, **factory.keywords)
