"""Grouped-query attention without the repeated keys and values (generation/gqa_rewrite.py,
ops/grouped_attention.py): the rewrite finds PaddleFormers' repeat pattern, computes what the captured
program computes, and the decode step no longer writes the repeated copy."""

import jax.numpy as jnp
import numpy as np
import pytest

from paddle_xla import x64
from paddle_xla.api.generator import Generator
from paddle_xla.generation import gqa_rewrite as GA
from paddle_xla.generation.batch_engine import program
from paddle_xla.lowering.lower import lower
from paddle_xla.ops.grouped_attention import grouped_scores, grouped_values

from .test_generator import BATCH, MODELS, SLOTS, _model


@pytest.mark.parametrize("heads,kv_heads,t", [(12, 4, 1), (4, 2, 5), (4, 4, 3), (6, 1, 2)])
def test_the_grouped_products_equal_the_repeated_ones(heads, kv_heads, t):
    rng = np.random.default_rng(heads * 10 + t)
    b, s, d = 3, 9, 8
    q, p = rng.standard_normal((b, heads, t, d), np.float32), rng.standard_normal((b, heads, t, s), np.float32)
    keys, values = (
        rng.standard_normal((b, kv_heads, s, d), np.float32),
        rng.standard_normal((b, kv_heads, s, d), np.float32),
    )
    repeat = heads // kv_heads
    k_rep, v_rep = np.repeat(keys, repeat, axis=1), np.repeat(values, repeat, axis=1)
    # NOTE: the same products, summed by other kernels: equal to float32 rounding, not to the bit
    np.testing.assert_allclose(
        grouped_scores(jnp.asarray(q), jnp.asarray(keys)),
        np.matmul(q.astype(np.float64), np.swapaxes(k_rep, -1, -2)),
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_allclose(
        grouped_values(jnp.asarray(p), jnp.asarray(values)),
        np.matmul(p.astype(np.float64), v_rep),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("heads,kv_heads", [(12, 4), (4, 4)])
def test_keys_and_values_in_parts_give_the_products_of_their_concatenation(heads, kv_heads):
    # NOTE: a decode step's cache and its new token, read where they lie
    rng = np.random.default_rng(heads)
    b, t, d, cut = 2, 3, 8, (7, 1)
    q, p = rng.standard_normal((b, heads, t, d), np.float32), rng.standard_normal((b, heads, t, sum(cut)), np.float32)
    keys = [rng.standard_normal((b, kv_heads, n, d), np.float32) for n in cut]
    values = [rng.standard_normal((b, kv_heads, n, d), np.float32) for n in cut]
    whole_k, whole_v = (jnp.asarray(np.concatenate(x, axis=2)) for x in (keys, values))
    np.testing.assert_allclose(
        grouped_scores(jnp.asarray(q), *map(jnp.asarray, keys)),
        grouped_scores(jnp.asarray(q), whole_k),
        rtol=1e-6,
        atol=1e-6,
    )
    np.testing.assert_allclose(
        grouped_values(jnp.asarray(p), *map(jnp.asarray, values)),
        grouped_values(jnp.asarray(p), whole_v),
        rtol=1e-5,
        atol=1e-5,
    )
    with pytest.raises(ValueError, match="over 8 slots do not match values in parts of \\[7, 2\\]"):
        grouped_values(jnp.asarray(p), jnp.asarray(values[0]), jnp.zeros((b, kv_heads, 2, d)))


def test_heads_that_do_not_split_into_groups_are_refused():
    with pytest.raises(ValueError, match="5 query heads do not split into groups over 2"):
        grouped_scores(jnp.zeros((1, 5, 1, 4)), jnp.zeros((1, 2, 3, 4)))


@pytest.fixture(scope="module", params=sorted(MODELS))
def gen(request):
    return Generator(_model(request.param), max_batch_size=BATCH, max_length=SLOTS, chunk=4, prefill_chunk=8)


def _feeds(graph, rng):
    out = []
    for f in graph.feeds:
        if f.name == "past":
            out.append(rng.standard_normal(f.shape).astype(np.float32))
        elif f.name == "attention_mask":
            out.append((rng.random(f.shape) > 0.2).astype(np.int64))
        elif f.name == "position_ids":
            out.append(np.broadcast_to(np.arange(f.shape[1]) + 3, f.shape).astype(np.int64).copy())
        else:
            out.append(rng.integers(3, 128, f.shape).astype(np.int64))
    return out


def test_the_rewritten_programs_compute_what_the_captured_ones_do(gen):
    # NOTE: the decode step, a prefill chunk and a bucket's prefill of each model: every attention matmul
    # of the 2 layers is rewritten (scores and values), and the outputs are the captured program's
    weights = gen.held.all_prepared(gen.source_weights)
    rng = np.random.default_rng(0)
    for graph in (gen.decode_captured.graph, gen.extend_captured(BATCH).graph, gen.prefill_captured(8).graph):
        names = [op.name for op in GA.rewrite(graph).ops()]
        assert names.count("paddle_xla.grouped_scores") == names.count("paddle_xla.grouped_values") == 2
        feeds = _feeds(graph, rng)
        with x64.scope():
            captured = lower(graph, gen.policy)
            params = {p.name: weights[p.name] for p in graph.params}
            want, _ = captured(params, {}, {f.name: v for f, v in zip(graph.feeds, feeds)}, None)
            got = program(graph, gen.policy, gen.held)(weights, *feeds)
        for w, g in zip(want, got):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)


def test_a_matmul_that_reads_anything_else_is_left_alone(gen):
    graph = gen.decode_captured.graph
    once = GA.rewrite(graph)
    assert GA.rewrite(once) is once  # nothing left to rewrite
    weight_matmuls = [op for op in once.ops() if op.name == "pd_op.matmul"]
    assert weight_matmuls and len(weight_matmuls) == len([op for op in graph.ops() if op.name == "pd_op.matmul"]) - 4


def test_the_decode_step_copies_no_keys_or_values(gen):
    # NOTE: the repeated copy is a [B, KV, G, S + 1, D] broadcast per layer; its absence is the point
    g = gen.geometry
    engine = gen.engine
    run = engine._run_fn(tuple(engine.defaults.eos_token_id), engine.defaults.pad_token_id)
    from paddle_xla.generation import slots as SL

    shape = (2 * g.layers, g.max_batch_size, g.kv_heads, g.max_length, g.head_dim)
    with x64.scope():
        hlo = run.lower(engine._device_params(), SL.empty(shape, g.cache_dtype, g.vocab_size)).compile().as_text()
    heads = gen.model.config.num_attention_heads
    repeated = f"f32[{g.max_batch_size},{g.kv_heads},{heads // g.kv_heads},{g.max_length + 1},{g.head_dim}]"
    assert repeated not in hlo
    # NOTE: nor a copy of a layer's cache: not the model's concat of the cache and the new token ([.., S + 1, ..]),
    # nor a slice of one stacked cache ([.., S, ..]); the only instructions making either shape are the
    # layers' own buffers and the in-place write of the step's K/V (a scatter)
    layer = (g.max_batch_size, g.kv_heads, g.max_length, g.head_dim)
    made = _makers(
        hlo,
        {f"f32[{','.join(map(str, layer))}]", f"f32[{','.join(map(str, layer[:2] + (layer[2] + 1,) + layer[3:]))}]"},
    )
    assert made and made <= {"parameter", "get-tuple-element", "bitcast", "tuple", "scatter"}, made


def _makers(hlo: str, types: set[str]) -> set[str]:
    """The kinds of the instructions in `hlo` whose result has one of `types` (a scatter fusion counts as scatter)."""
    kinds = set()
    for line in hlo.splitlines():
        name, _, rest = line.strip().removeprefix("ROOT ").partition(" = ")
        result, _, op = rest.partition(" ")
        if result.split("{")[0] in types:
            kind = op.split("(")[0]
            kinds.add("scatter" if "scatter" in name else kind)
    return kinds
