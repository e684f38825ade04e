"""Graphs lowered in lockstep (lowering/shared_products.py, batch_engine.program_together): each Graph's fetches are
bit for bit its own program's, and a product is shared only where its weight is held as [N, K]."""

import dataclasses

import jax
import numpy as np
import pytest

from paddle_xla import x64
from paddle_xla.api.generator import Generator
from paddle_xla.generation.batch_engine import held_weights, program, program_together

from .test_generator import BATCH, SLOTS, TINY, _model

CHUNK = 8


@pytest.fixture(scope="module")
def gen():
    return Generator(_model("llama"), max_batch_size=BATCH, max_length=SLOTS, chunk=1, prefill_chunk=CHUNK)


def _feeds(rng, batch, tokens):
    layers2, heads, dim = 2 * TINY["num_hidden_layers"], TINY["num_key_value_heads"], TINY["head_dim"]
    valid = (rng.random((batch, SLOTS)) < 0.5).astype(np.int64)
    return (
        rng.integers(0, TINY["vocab_size"], (batch, tokens)).astype(np.int64),
        np.concatenate([valid, np.ones((batch, tokens), np.int64)], axis=1),
        np.arange(tokens, dtype=np.int64)[None].repeat(batch, 0) + 20,
        rng.standard_normal((layers2, batch, heads, SLOTS, dim)).astype(np.float32),
    )


@pytest.mark.parametrize("nk", [True, False])
def test_a_decode_step_and_a_chunk_together_give_what_each_gives_alone(gen, nk):
    policy = dataclasses.replace(gen.policy, nk_weights=nk)
    graphs = [gen.decode_captured.graph, gen.extend_captured(1).graph]
    held = held_weights(graphs[0], policy)
    weights = held.all_prepared(gen.source_weights)
    rng = np.random.default_rng(0)
    step, chunk = _feeds(rng, BATCH, 1), _feeds(rng, 1, CHUNK)
    both = jax.jit(program_together(graphs, policy, held))
    with x64.scope():
        got = both(weights, step, chunk)
        alone = [jax.jit(program(g, policy, held))(weights, *f) for g, f in zip(graphs, (step, chunk))]
        hlo = both.lower(weights, step, chunk).compile().as_text()
    for g, a in zip(got, alone):
        for x, y in zip(g, a):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    stacked = [line for line in hlo.splitlines() if " dot(" in line and f"f32[{BATCH + CHUNK}," in line]
    # NOTE: every linear layer of every block stacks with [N, K] weights (q, k, v, o, gate, up, down); none without
    assert len(stacked) == (7 * TINY["num_hidden_layers"] if nk else 0), stacked


# ---- hand-built Graphs: the lockstep walk when the Graphs reach their weights in different orders --------
def _two_layer(first: str, second: str, rows: int):
    """x [rows, 64] -> relu(x @ first) @ second, the weights named "A" and "B"."""
    from paddle_xla.graph import Block, Graph, Op, Param, Tensor

    ids = {"A": 1, "B": 2}
    mm = {"transpose_x": False, "transpose_y": False}
    ops = (
        Op("pd_op.matmul", (0, ids[first]), (3,), mm, index=0),
        Op("pd_op.relu", (3,), (4,), {}, index=1),
        Op("pd_op.matmul", (4, ids[second]), (5,), mm, index=2),
    )
    params = tuple(Param(n, v, (64, 64), "float32") for n, v in ids.items())
    return Graph(
        Block((), ops), (Tensor("x", 0, (rows, 64), "float32"),), params, (Tensor("y", 5, (rows, 64), "float32"),)
    )


@pytest.mark.parametrize("order, stacked", [(("A", "B"), 2), (("B", "A"), 1)])
def test_graphs_that_reach_their_weights_in_another_order_stack_where_they_meet(order, stacked):
    from paddle_xla.lowering.policy import LoweringPolicy

    policy = LoweringPolicy(nk_weights=True, forward_only=True)
    graphs = [_two_layer("A", "B", 4), _two_layer(*order, 6)]
    rng = np.random.default_rng(1)
    weights = {n: rng.standard_normal((64, 64)).astype(np.float32) for n in "AB"}
    feeds = [(rng.standard_normal((4, 64)).astype(np.float32),), (rng.standard_normal((6, 64)).astype(np.float32),)]
    both = jax.jit(program_together(graphs, policy))
    got = both(weights, *feeds)
    for g, f, out in zip(graphs, feeds, got):
        np.testing.assert_array_equal(np.asarray(out[0]), np.asarray(jax.jit(program(g, policy))(weights, *f)[0]))
    hlo = both.lower(weights, *feeds).compile().as_text()
    assert sum(" dot(" in line and "f32[10,64]" in line for line in hlo.splitlines()) == stacked
