"""The interpreter a pipeline of tensor-split stages runs its stages with.

Each stage's code sits in a branch of lax.switch. Inside such a branch XLA:CPU's collective-permute
waits for every device of the program, also those running another stage's branch, and so never
returns; all-reduces and all-gathers wait only for their own group of devices. GSPMD cuts a
tensor-split activation into misaligned pieces (a fused q/k/v output split in three) with
collective-permutes, so a split's operand and pieces are kept whole: an all-gather, then local slices."""

from __future__ import annotations

import functools

import jax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ..lowering.interpreter import Interpreter
from ..lowering.lower import InterpreterFactory

SPLITS = frozenset({"pd_op.split", "pd_op.split_with_num"})


class WholeBeforeSplit(Interpreter):
    def __init__(self, key, *, mesh: Mesh, **kwargs):
        super().__init__(key, **kwargs)
        self.mesh = mesh

    def apply(self, op, args, env):
        if op.name not in SPLITS:
            return super().apply(op, args, env)
        out = super().apply(op, [self._whole(args[0]), *args[1:]], env)
        # NOTE: the pieces too (one list value in PIR): else GSPMD slices a sharded copy of the operand,
        # with halo exchanges
        return self._whole(out)

    def _whole(self, tree):
        whole = NamedSharding(self.mesh, P())
        return jax.tree.map(
            lambda x: jax.lax.with_sharding_constraint(x, whole) if isinstance(x, jax.Array) else x, tree
        )  # NOTE: tracers are jax.Arrays too


def whole_before_split(factory: InterpreterFactory, mesh: Mesh) -> InterpreterFactory:
    """`factory` (lower.interpreter_factory's partial) with splits' operands made whole first."""
    return functools.partial(WholeBeforeSplit, mesh=mesh, **factory.keywords)
