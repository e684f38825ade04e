"""The LM head on the last position only (generation/last_logits.py): each prefill and prefill chunk of
PaddleFormers' Llama, Qwen2 and ERNIE 4.5 multiplies one row per prompt by the head, and returns what the
captured program returns (the products' numbers: test_grouped_attention's program test runs both rewrites)."""

import dataclasses

import numpy as np

from paddle_xla import x64
from paddle_xla.generation import last_logits
from paddle_xla.generation.batch_engine import program
from paddle_xla.lowering.lower import lower

from .test_generator import BATCH
from .test_grouped_attention import _feeds, gen  # noqa: F401  (the fixture)


def _head(graph):
    """The op making the first fetch (the logits), and the op making its left operand."""
    made = {v: op for op in graph.block.ops for v in op.outputs}
    head = made[graph.fetches[0].value]
    return head, made.get(head.inputs[0])


def test_the_head_multiplies_only_the_last_position(gen):  # noqa: F811
    weights = gen.held.all_prepared(gen.source_weights)
    rng = np.random.default_rng(0)
    for graph in (gen.extend_captured(BATCH).graph, gen.extend_captured(1).graph, gen.prefill_captured(8).graph):
        head, rows = _head(last_logits.rewrite(graph))
        assert head.name == "pd_op.matmul" and rows.name == "pd_op.slice"
        assert _head(graph)[0].name == "pd_op.slice"  # as captured: the slice after
        feeds = _feeds(graph, rng)
        with x64.scope():
            params = {p.name: weights[p.name] for p in graph.params}
            want, _ = lower(graph, gen.policy)(params, {}, {f.name: v for f, v in zip(graph.feeds, feeds)}, None)
            got = program(graph, gen.policy, gen.held)(weights, *feeds)
        np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=1e-5, atol=1e-5)


def test_a_product_read_elsewhere_stays_whole(gen):  # noqa: F811
    graph = gen.prefill_captured(8).graph
    product = _head(graph)[0].inputs[0]
    # NOTE: the whole logits also fetched: the head must still compute every row
    wider = dataclasses.replace(graph, fetches=graph.fetches + (dataclasses.replace(graph.fetches[0], value=product),))
    assert last_logits.rewrite(wider) is wider
