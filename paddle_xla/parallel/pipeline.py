"""Pipeline stages as one SPMD program: a GPipe schedule in a lax.scan, per device inside shard_map.

Tick t, device (replica r, stage s) runs micro-batch m = t - s through its stage when
0 <= m < micro_batches, then hands what it sends to stage s + 1 with `ppermute` over the "stage"
axis. M + S - 1 ticks fill and drain the pipe; jax.grad of the scan runs the backward pipe in
reverse, with the transposed ppermute carrying gradients back. Bubble fraction: (S-1)/(M+S-1).

Stages need not be alike: each device picks its stage's code with lax.switch on its stage index,
and weights and activations are packed per dtype (parallel.pack) so every device holds arrays of
one shape. An idle branch (bubble ticks) does no work.

SPMD or MPMD (one jitted program per stage, driven from the host)? Measured with
benchmarks/parallel.py (BERT 4 x 128 hidden, batch 32, seq 64, 4 stages x 8 micro-batches, on 16
virtual CPU devices sharing 2 cores; two runs): SPMD 0.41 and 0.66 s per step, a host-driven GPipe
of jitted per-stage forward/vjp programs 0.31 and 0.30 s. MPMD won on this machine: its devices never
wait in lock step for the slowest stage of a tick, and it skips the packing copies. SPMD is still the
choice, because
  - `steps_per_call` (Paddle-IPU's batches_per_step) needs the whole step, optimizer included, in one
    device loop; host-driven MPMD returns to Python 2 x S x M times per step;
  - across processes (`paddle-xla launch`) JAX moves data between hosts only through collectives of
    SPMD programs; a host-driven schedule would need its own send/receive layer, which DESIGN.md
    rules out;
  - replicas, stages, ZeRO-1 and loss scaling compose in one compiled program, compiled once.
The costs: each device's program holds every stage's code (compile time grows with stages); stage
weights are packed to the widest stage, so every device holds as many weight bytes as the largest
stage (the "auto" placement balances weight bytes as well as FLOPs for this reason); and without
recomputation a scan over a switch keeps residual slots for every branch (merged by shape), so
recompute="stage" (only each tick's received activations saved) is the memory-lean setting: 94 -> 28
MiB of temporaries per device in that benchmark, and it ran faster too (0.36 vs 0.66 s)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .context import Context, loss_of, stage_forward, zeros_like_tree, zeros_of
from .data import add_buffers, mean_buffers


def bubble_fraction(stages: int, micro_batches: int) -> float:
    return (stages - 1) / (micro_batches + stages - 1) if stages > 1 else 0.0


def _branches(ctx: Context, fetch_templates):
    S, box = ctx.stages, ctx.widths["box"]
    zero_box = lambda: {dt: jnp.zeros((w,), dt) for dt, w in box.items()}  # noqa: E731
    zero_B = lambda: {dt: jnp.zeros((w,), dt) for dt, w in ctx.widths["buffers"].items()}  # noqa: E731

    def stage(k):
        def run(inbox, feeds, key, P, Sh, B):
            received = ctx.sends[k - 1].unpack(inbox) if k else ()
            outs, newB = stage_forward(ctx, k, P, Sh, B, feeds, key, received)
            if k < S - 1:
                return ctx.sends[k].pack(outs, box), jnp.float32(0.0), zeros_of(fetch_templates), newB
            loss = loss_of(outs[0]) * jnp.float32(ctx.loss_weight)
            fetches = tuple(
                jax.tree.map(lambda v, t: jnp.asarray(v).astype(t.dtype), o, t)
                for o, t in zip(outs[1:], fetch_templates)
            )
            return zero_box(), loss, fetches, newB

        return run

    def idle(inbox, feeds, key, P, Sh, B):
        return zero_box(), jnp.float32(0.0), zeros_of(fetch_templates), zero_B()

    fns = [stage(k) for k in range(S)] + [idle]
    if ctx.recompute in ("full", "stage"):
        fns = [jax.checkpoint(f, prevent_cse=False) for f in fns]
    return fns


def gpipe(ctx: Context, P, Sh, B, feeds, keys, scale, fetch_templates):
    """(loss, (grad P, grad Sh), fetches [M, ...], buffers) of this device's stage.

    The loss is non-zero on the last stage only; fetches are summed over stages (zero elsewhere)."""
    S, M = ctx.stages, ctx.micro_batches
    s = jax.lax.axis_index("stage")
    fns = _branches(ctx, fetch_templates)
    box0 = {dt: jnp.zeros((w,), dt) for dt, w in ctx.widths["box"].items()}

    def total(P, Sh):
        def tick(carry, t):
            inbox, loss, bsum = carry
            m = t - s
            valid = (m >= 0) & (m < M)
            mi = jnp.clip(m, 0, M - 1)
            fm = jax.tree.map(lambda x: x[mi], feeds)
            out, step_loss, fetch, newB = jax.lax.switch(jnp.where(valid, s, S), fns, inbox, fm, keys[mi], P, Sh, B)
            bsum = jax.tree.map(lambda a, b: jnp.where(valid, a, b), add_buffers(bsum, newB), bsum)
            nxt = jax.lax.ppermute(out, "stage", [(i, i + 1) for i in range(S - 1)])
            return (nxt, loss + step_loss, bsum), fetch

        (_, loss, bsum), fetches = jax.lax.scan(
            tick, (box0, jnp.float32(0.0), zeros_like_tree(B)), jnp.arange(M + S - 1)
        )
        return loss * scale, (loss, fetches, bsum)

    (_, (loss, fetches, bsum)), grads = jax.value_and_grad(total, argnums=(0, 1), has_aux=True)(P, Sh)
    last = s == S - 1
    # NOTE: the last stage ran micro-batch m at tick m + S - 1.
    fetches = jax.tree.map(
        lambda x: jax.lax.psum(jnp.where(last, x[S - 1 :], jnp.zeros_like(x[S - 1 :])), "stage"), fetches
    )
    return loss, grads, fetches, mean_buffers(bsum, M)
