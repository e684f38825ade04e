"""pd_op.if and pd_op.while as lax.cond and lax.while_loop.

A control lowering receives the interpreter, the Op (with its sub-blocks) and the environment, so
values defined outside a block are read by closure, as PIR blocks read them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .registry import lowering
from .util import is_static


def _run_to_yield(interp, block, env, args=()):
    """Run a block's ops up to its cf.yield; return the yielded values."""
    local = dict(env)
    for vid, val in zip(block.args, args):
        local[vid] = val
    body, last = block.ops[:-1], block.ops[-1]
    assert last.name == "cf.yield", f"block ends in {last.name}, not cf.yield"
    interp.run_block(type(block)(args=block.args, ops=body), local)
    return [local[i] for i in last.inputs]


@lowering("cf.yield")
def yield_(*xs):
    # NOTE: handled by the enclosing if/while; registered so coverage counts it as supported.
    return ()


@lowering("pd_op.if", kind="control")
def if_(interp, op, env, cond):
    true_block, false_block = op.blocks
    if is_static(cond):
        block = true_block if bool(np.asarray(cond).reshape(())) else false_block
        return tuple(_run_to_yield(interp, block, env))

    def branch(block):
        return lambda: tuple(jnp.asarray(v) for v in _run_to_yield(interp, block, env))

    return jax.lax.cond(jnp.reshape(cond, ()), branch(true_block), branch(false_block))


@lowering("pd_op.assert", kind="control")
def assert_(interp, op, env, cond, data=None, *, summarize=20):
    """Paddle's assert: its condition, checked when the program runs (interp.check decides how)."""
    interp.check(op, jnp.all(jnp.asarray(cond)) if not is_static(cond) else bool(np.all(cond)))
    return ()


@lowering("pd_op.while", kind="control")
def while_(interp, op, env, cond, *inputs):
    (body,) = op.blocks
    # NOTE: random ops in the body (dropout) draw from a key folded with the iteration number, so
    # each iteration gets its own mask, as Paddle's generator advancing per call gives.
    loop_key = interp.op_key(op)
    if is_static(cond, *inputs):
        return _unrolled(interp, loop_key, body, env, cond, inputs)
    carry = (jnp.reshape(jnp.asarray(cond), ()), jnp.int32(0), tuple(jnp.asarray(v) for v in inputs))

    def step(c):
        it = interp.with_key(jax.random.fold_in(loop_key, c[1]))
        new_cond, *values = _run_to_yield(it, body, env, c[2])
        values = tuple(jnp.asarray(v).astype(old.dtype) for v, old in zip(values, c[2]))
        return jnp.reshape(jnp.asarray(new_cond), ()), c[1] + 1, values

    # NOTE: lax.while_loop has no reverse-mode derivative; training through a data-dependent loop
    # is reported by the train step, which suggests a static trip count.
    _, _, out = jax.lax.while_loop(lambda c: c[0], step, carry)
    return out


def _unrolled(interp, loop_key, body, env, cond, values):
    """A loop whose condition is known while tracing (shape arithmetic): run it on the host."""
    values, i = list(values), 0
    while bool(np.asarray(cond).reshape(())):
        cond, *values = _run_to_yield(interp.with_key(jax.random.fold_in(loop_key, i)), body, env, values)
        i += 1
        if not is_static(cond):
            raise ValueError("a while loop's condition became data-dependent after starting static")
    return tuple(values)
