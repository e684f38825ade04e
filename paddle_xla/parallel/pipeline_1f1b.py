"""The 1F1B pipeline schedule as one SPMD program: forward and backward interleaved in one lax.scan.

Tick t, device (replica r, stage s): the forward of micro-batch f = t - s, then the backward of
micro-batch b = t - (2S - 2 - s), each when it lies in [0, M). Forward activations go to stage s + 1
and input gradients to stage s - 1 with one `ppermute` each per tick; the last stage runs the
backward of a micro-batch in the tick of its forward. M + 2S - 2 ticks in all.

Why it pays: a stage keeps only the inputs of the micro-batches between their forward and their
backward, at most 2S - 1 of them, whatever M is. GPipe (pipeline.py) differentiates the whole
forward scan, so it keeps every tick's activations (or, with recompute="stage", every tick's inputs):
memory that grows with M. With 1F1B, M can be raised to shrink the bubble without the memory growing.

What it costs: the backward rebuilds the stage's forward from the stashed input (jax.vjp in the
backward tick; the residuals of a heterogeneous stage chosen by lax.switch cannot ride in a scan
carry), so a stage computes 2 forwards + 1 backward per micro-batch, as GPipe does with
recompute="stage". In lock-step ticks a gradient needs a tick per hop back, so the bubble is
(2S - 2) / (M + 2S - 2) against GPipe's (S - 1) / (M + S - 1).

Buffers (BatchNorm statistics) update in the forward tick, as with GPipe; the last stage, whose
forward is its backward's, takes them from there."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .context import Context, loss_of, stage_forward, zeros_like_tree, zeros_of
from .data import add_buffers, mean_buffers


def bubble_fraction(stages: int, micro_batches: int) -> float:
    return (2 * stages - 2) / (micro_batches + 2 * stages - 2) if stages > 1 else 0.0


def stash_slots(stages: int, micro_batches: int) -> int:
    """Stage 0 holds a micro-batch's input from tick m to tick m + 2S - 2: 2S - 1 slots (at most M)."""
    return min(micro_batches, 2 * stages - 1)


def _floating(box):
    """The differentiable part of a packed box (integer and bool parts carry no gradient)."""
    return {dt: x for dt, x in box.items() if jnp.issubdtype(x.dtype, jnp.inexact)}


def _forward_branches(ctx: Context, box_zero, buffers_zero):
    """Stages 0 .. S-2: run micro-batch f and pack what goes to the next stage; then the idle branch."""
    S, box = ctx.stages, ctx.widths["box"]

    def stage(k):
        def run(inbox, feeds, key, P, Sh, B):
            received = ctx.sends[k - 1].unpack(inbox) if k else ()
            outs, newB = stage_forward(ctx, k, P, Sh, B, feeds, key, received)
            return ctx.sends[k].pack(outs, box), newB

        return run

    def idle(inbox, feeds, key, P, Sh, B):
        return zeros_of(box_zero), zeros_of(buffers_zero)

    return [stage(k) for k in range(S - 1)] + [idle]


def _backward_branches(ctx: Context, fetch_templates, box_zero, buffers_zero):
    """Every stage: rebuild the forward of micro-batch b from its stashed input and pull the incoming
    gradient (the last stage: the loss scale) back to the weights and the input; then the idle branch.
    Each returns (input gradient box, dP, dSh, loss, fetches, buffers)."""
    S, box = ctx.stages, ctx.widths["box"]

    def stage(k):
        last = k == S - 1

        def run(inbox, gbox, feeds, key, P, Sh, B, scale):
            fixed = {dt: x for dt, x in inbox.items() if dt not in _floating(inbox)}

            def forward(P, Sh, floats):
                received = ctx.sends[k - 1].unpack({**fixed, **floats}) if k else ()
                outs, newB = stage_forward(ctx, k, P, Sh, B, feeds, key, received)
                if not last:
                    return _floating(ctx.sends[k].pack(outs, box)), (zeros_of(fetch_templates), newB)
                fetches = tuple(
                    jax.tree.map(lambda v, t: jnp.asarray(v).astype(t.dtype), o, t)
                    for o, t in zip(outs[1:], fetch_templates)
                )
                return loss_of(outs[0]) * jnp.float32(ctx.loss_weight), (fetches, newB)

            out, pull, (fetches, newB) = jax.vjp(forward, P, Sh, _floating(inbox), has_aux=True)
            dP, dSh, dIn = pull(scale.astype(out.dtype) if last else _floating(gbox))
            dIn = dIn if k else zeros_of(_floating(box_zero))
            return dIn, dP, dSh, out if last else jnp.float32(0.0), fetches, newB

        return run

    def idle(inbox, gbox, feeds, key, P, Sh, B, scale):
        return (
            zeros_of(_floating(box_zero)),
            zeros_like_tree(P),
            zeros_like_tree(Sh),
            jnp.float32(0.0),
            zeros_of(fetch_templates),
            zeros_of(buffers_zero),
        )

    fns = [stage(k) for k in range(S)] + [idle]
    if ctx.recompute == "full":
        fns = [jax.checkpoint(f, prevent_cse=False) for f in fns]
    return fns


def one_f_one_b(ctx: Context, P, Sh, B, feeds, keys, scale, fetch_templates):
    """(loss, (grad P, grad Sh), fetches [M, ...], buffers) of this device's stage, as gpipe returns."""
    S, M = ctx.stages, ctx.micro_batches
    K = stash_slots(S, M)
    s = jax.lax.axis_index("stage")
    box0 = {dt: jnp.zeros((w,), dt) for dt, w in ctx.widths["box"].items()}
    fwd = _forward_branches(ctx, box0, B)
    bwd = _backward_branches(ctx, fetch_templates, box0, B)
    pick = lambda i: jax.tree.map(lambda x: x[i], feeds)  # noqa: E731
    to_next = [(i, i + 1) for i in range(S - 1)]
    to_prev = [(i + 1, i) for i in range(S - 1)]

    def tick(carry, t):
        inbox, gin, stash, gP, gSh, loss, bsum = carry
        f, b = t - s, t - (2 * S - 2 - s)
        run_f = (f >= 0) & (f < M) & (s < S - 1)
        run_b = (b >= 0) & (b < M)
        fi, bi = jnp.clip(f, 0, M - 1), jnp.clip(b, 0, M - 1)
        # NOTE: the input is stashed before the backward reads it: the last stage reads it this tick.
        keep = (f >= 0) & (f < M)
        stash = jax.tree.map(lambda st, x: st.at[fi % K].set(jnp.where(keep, x, st[fi % K])), stash, inbox)
        out, newB_f = jax.lax.switch(jnp.where(run_f, s, S - 1), fwd, inbox, pick(fi), keys[fi], P, Sh, B)
        stashed = jax.tree.map(lambda st: st[bi % K], stash)
        dIn, dP, dSh, step_loss, fetch, newB_b = jax.lax.switch(
            jnp.where(run_b, s, S), bwd, stashed, gin, pick(bi), keys[bi], P, Sh, B, scale
        )
        add = lambda a, c: jax.tree.map(jnp.add, a, c)  # noqa: E731
        bsum = jax.tree.map(lambda a, c: jnp.where(run_f, a, c), add_buffers(bsum, newB_f), bsum)
        last_b = run_b & (s == S - 1)
        bsum = jax.tree.map(lambda a, c: jnp.where(last_b, a, c), add_buffers(bsum, newB_b), bsum)
        nxt = jax.lax.ppermute(out, "stage", to_next)
        back = jax.lax.ppermute(dIn, "stage", to_prev)
        return (nxt, back, stash, add(gP, dP), add(gSh, dSh), loss + step_loss, bsum), fetch

    stash0 = {dt: jnp.zeros((K,) + x.shape, x.dtype) for dt, x in box0.items()}
    init = (
        box0,
        _floating(box0),
        stash0,
        zeros_like_tree(P),
        zeros_like_tree(Sh),
        jnp.float32(0.0),
        zeros_like_tree(B),
    )
    (_, _, _, gP, gSh, loss, bsum), fetches = jax.lax.scan(tick, init, jnp.arange(M + 2 * S - 2))
    # NOTE: the last stage ran the backward (and so the fetches) of micro-batch m at tick m + S - 1.
    last = s == S - 1
    ran = lambda x: x[S - 1 : S - 1 + M]  # noqa: E731
    fetches = jax.tree.map(lambda x: jax.lax.psum(jnp.where(last, ran(x), jnp.zeros_like(ran(x))), "stage"), fetches)
    return loss, (gP, gSh), fetches, mean_buffers(bsum, M)
