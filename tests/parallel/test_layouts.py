"""Every layout of replicas x stages reproduces one device (16 virtual CPU devices, conftest)."""

import numpy as np
import pytest

import paddle_xla as px
from parallel.helpers import assert_weights_close, native, train

LAYOUTS = [(16, 1), (1, 4), (4, 4), (2, 8)]


PIPELINES = [(1, 4), (4, 4), (2, 8)]


def _strategy(replicas, stages, schedule="gpipe"):
    # NOTE: a pipeline needs micro_batches >= stages; a batch of 16 splits into replicas x micro_batches.
    return px.Strategy(replicas=replicas, stages=stages, micro_batches=max(stages, 1), schedule=schedule)


@pytest.fixture(scope="module")
def bert_reference():
    losses, weights, _ = train("bert")
    return losses, weights


@pytest.mark.parametrize("replicas,stages", LAYOUTS)
def test_bert_layout_matches_one_device(bert_reference, replicas, stages):
    losses, weights, _ = train("bert", _strategy(replicas, stages))
    np.testing.assert_allclose(losses, bert_reference[0], rtol=1e-5)
    assert_weights_close(weights, bert_reference[1])


@pytest.fixture(scope="module")
def cnn_reference():
    """One device, the batch in 16 (or 4) micro-batches: BatchNorm statistics per micro-batch, as
    each replica x micro-batch group computes them."""
    return {groups: train("cnn", px.Strategy(micro_batches=groups))[:2] for groups in (4, 16)}


@pytest.mark.parametrize("replicas,stages", PIPELINES)
def test_bert_1f1b_matches_one_device(bert_reference, replicas, stages):
    losses, weights, _ = train("bert", _strategy(replicas, stages, "1f1b"))
    np.testing.assert_allclose(losses, bert_reference[0], rtol=1e-5)
    assert_weights_close(weights, bert_reference[1])


@pytest.mark.parametrize(
    "replicas,stages,schedule", [(r, s, "gpipe") for r, s in LAYOUTS] + [(r, s, "1f1b") for r, s in PIPELINES]
)
def test_cnn_layout_matches_one_device(cnn_reference, replicas, stages, schedule):
    st = _strategy(replicas, stages, schedule)
    losses, weights, _ = train("cnn", st)
    ref_losses, ref_weights = cnn_reference[st.groups]
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    assert_weights_close(weights, ref_weights)  # running statistics included


def test_cnn_micro_batches_match_native_paddle(cnn_reference):
    """The semantics: gradients of equal parts add up, as in native Paddle with backward() per part.
    (Running statistics differ on purpose: Paddle updates them part after part, paddle_xla averages
    each part's update, so that they do not depend on how parts are spread over replicas.)"""
    want_losses, want = native("cnn", 4)
    got_losses, got = cnn_reference[4]
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-4)
    assert_weights_close(got, want, rtol=1e-3, atol=1e-5, skip=("_mean", "_variance"))
