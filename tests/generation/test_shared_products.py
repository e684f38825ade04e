"""Graphs lowered in lockstep (lowering/shared_products.py, engine.program_together): each Graph's fetches are
bit for bit its own program's, and a product is shared only where its weight is held as [N, K]."""
import dataclasses

import jax
import numpy as np
import pytest

from paddle_xla import x64
from paddle_xla.generation.engine import held_weights, program, program_together
from paddle_xla.generator import Generator

from .test_generator import BATCH, SLOTS, TINY, _model

CHUNK = 8


@pytest.fixture(scope="module")
def gen():
    return Generator(_model("llama"), max_batch_size=BATCH, max_length=SLOTS, chunk=1, prefill_chunk=CHUNK)


def _feeds(rng, batch, tokens):
    layers2, heads, dim = 2 * TINY["num_hidden_layers"], TINY["num_key_value_heads"], TINY["head_dim"]
    valid = (rng.random((batch, SLOTS)) < 0.5).astype(np.int64)
    return (rng.integers(0, TINY["vocab_size"], (batch, tokens)).astype(np.int64),
            np.concatenate([valid, np.ones((batch, tokens), np.int64)], axis=1),
            np.arange(tokens, dtype=np.int64)[None].repeat(batch, 0) + 20,
            rng.standard_normal((layers2, batch, heads, SLOTS, dim)).astype(np.float32))


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
