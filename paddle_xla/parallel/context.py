"""What the per-device step functions share: the stages, how weights are packed, the precision and
recomputation choices. Built on the host once per input shape; read inside shard_map. Built by keyword
only (14 fields, several of the same type: a positional slip would go unnoticed)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from ..graph import Graph
from ..lowering.lower import InterpreterFactory
from .pack import Packing
from .program import SubProgram, run


@dataclass(frozen=True, kw_only=True)
class Context:
    graph: Graph
    subs: tuple[SubProgram, ...]  # one per stage
    params: tuple[Packing, ...]  # per stage: its trainable weights
    buffers: tuple[Packing, ...]  # per stage: its buffers
    opt: tuple[Packing, ...]  # per stage: its optimizer state
    widths: Mapping[str, Mapping[str, int]]  # "params" | "buffers" | "opt" | "box" -> dtype -> width
    sends: tuple[Packing, ...]  # boundary k -> k+1
    replicas: int
    stages: int
    micro_batches: int
    loss_weight: float  # 1/groups for a mean loss, 1 for a sum
    interpreter: InterpreterFactory
    recompute: str | None
    weights_in: Callable | None = None  # P as this device holds it -> P as the program reads it (sharding=3)
    feeds_in: Callable | None = None  # a micro-batch's feeds -> the same, split along the sequence

    @property
    def groups(self) -> int:
        return self.replicas * self.micro_batches

    def size(self, axis: str) -> int:
        return {"replica": self.replicas, "stage": self.stages}[axis]


# ---- collectives that vanish over axes of size one -----------------------------------------------
# NOTE: so a one-device layout needs no shard_map at all (XLA on CPU runs a shard_map program of one
# device ~30% slower than the same plain program), and size-one axes cost nothing elsewhere.
def _axes(ctx: Context, axes) -> tuple[str, ...]:
    axes = (axes,) if isinstance(axes, str) else tuple(axes)
    return tuple(a for a in axes if ctx.size(a) > 1)


def psum(ctx: Context, x, axes):
    live = _axes(ctx, axes)
    return jax.lax.psum(x, live) if live else x


def pmean(ctx: Context, x, axes):
    live = _axes(ctx, axes)
    return jax.lax.pmean(x, live) if live else x


def pmin(ctx: Context, x, axes):
    live = _axes(ctx, axes)
    return jax.lax.pmin(x, live) if live else x


def psum_scatter(ctx: Context, x, axis: str, dim: int):
    """The sum over `axis`, this device keeping its 1/size slice of dimension `dim`."""
    if ctx.size(axis) == 1:
        return x
    return jax.lax.psum_scatter(x, axis, scatter_dimension=dim, tiled=True)


def all_gather(ctx: Context, x, axis: str, dim: int):
    """The slices of dimension `dim` that the devices along `axis` hold, joined."""
    if ctx.size(axis) == 1:
        return x
    return jax.lax.all_gather(x, axis, axis=dim, tiled=True)


def axis_index(ctx: Context, axis: str):
    return jax.lax.axis_index(axis) if ctx.size(axis) > 1 else jnp.int32(0)


def stage_forward(
    ctx: Context, s: int, P: Mapping, Sh: Mapping, B: Mapping, feeds: Mapping, key, received: Sequence = ()
) -> tuple[list, dict]:
    """Stage s on one micro-batch: (its outputs, its buffers packed after the update)."""
    old = ctx.buffers[s].unpack(B)
    weights = {**ctx.params[s].unpack(P), **Sh, **old}
    if ctx.feeds_in is not None:
        feeds = ctx.feeds_in(feeds)
    outs, new = run(
        ctx.graph,
        ctx.subs[s],
        weights,
        feeds,
        received,
        key,
        interpreter=ctx.interpreter,
        remat_layers=ctx.recompute == "layer",
    )
    return outs, ctx.buffers[s].pack({**old, **new}, ctx.widths["buffers"])


def by_stage(ctx: Context, fns: Sequence, index, *args):
    """Run fns[index](*args): a plain call with one stage, else lax.switch on the device's stage."""
    if len(fns) == 1:
        return fns[0](*args)
    return jax.lax.switch(index, list(fns), *args)


def zeros_like_tree(tree):
    return jax.tree.map(jnp.zeros_like, tree)


def zeros_of(templates):
    """Zeros shaped like a tree of arrays or ShapeDtypeStructs (an idle branch's outputs)."""
    return jax.tree.map(lambda t: jnp.zeros(t.shape, t.dtype), templates)


def loss_of(fetch) -> jax.Array:
    from ..train.step import loss_value

    return loss_value(fetch)


def group_keys(key, replica, micro_batches: int, groups: int) -> Any:
    """One key per micro-batch: group g = replica * micro_batches + m, so a layout with the same
    number of groups draws the same random numbers. One group keeps the step key itself."""
    if groups == 1:
        return key[None]
    g = replica * micro_batches + jnp.arange(micro_batches)
    return jax.vmap(lambda i: jax.random.fold_in(key, i))(g)


def scan(f, init, xs):
    """lax.scan, or one plain call when there is a single step.

    NOTE: XLA on CPU runs a while loop's body without the thread-level concurrency it gives a
    straight-line program, so a loop of one step is not a loop here."""
    n = jax.tree.leaves(xs)[0].shape[0]
    if n != 1:
        return jax.lax.scan(f, init, xs)
    carry, y = f(init, jax.tree.map(lambda x: x[0], xs))
    return carry, jax.tree.map(lambda v: jnp.expand_dims(v, 0), y)
