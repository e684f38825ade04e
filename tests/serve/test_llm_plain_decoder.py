"""A plain paddle.nn decoder (models/gpt.py: forward(input_ids) -> logits, no cache API) served: its derived
cache runs one row's decode step per row (generation/derive.py), so requests of different lengths decode
side by side, each getting what the live generator's generate gives its prompt alone."""

import numpy as np
import paddle
import pytest

import paddle_xla as px
import paddle_xla.artifact as pxa
from paddle_xla.api.generator import Generator
from paddle_xla.errors import GenerationError
from paddle_xla.models.gpt import GPT, GPTConfig

from .harness import ServeProcess, greedy_at_once

VOCAB, ROWS, CONTEXT = 96, 4, 48


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    """(served folder, the live generator)."""
    paddle.seed(1)
    net = GPT(GPTConfig.named("tiny", vocab_size=VOCAB, n_ctx=64))
    net.eval()
    gen = Generator(net, max_batch_size=ROWS, max_length=CONTEXT, chunk=4)
    folder = tmp_path_factory.mktemp("gpt")
    px.export(gen, str(folder / "gpt.pxa"))
    return str(folder), gen


def _alone(gen, ids, max_tokens):
    out, _ = gen.generate(np.array([ids]), max_new_tokens=max_tokens)
    return [int(t) for t in out[0]]


def test_a_plain_decoder_serves_requests_of_different_lengths_at_once_with_generates_tokens(gpt):
    folder, gen = gpt
    rng = np.random.default_rng(3)
    prompts = [[int(i) for i in rng.integers(0, VOCAB, n)] for n in (3, 17, 9, 30, 1, 12, 21, 6)]
    server = ServeProcess(folder)
    try:
        assert "gpt: paged KV cache of 192 tokens in blocks of 16" in server.output
        assert "gpt: device memory: weights " in server.output and "KV cache 192.00 KiB" in server.output
        got = greedy_at_once(server, "gpt", prompts, 10)
    finally:
        server.stop()
    server.no_compiles_after_ready()
    assert got == [_alone(gen, ids, 10) for ids in prompts]


def test_only_the_paged_engine_serves_a_plain_decoder(gpt):
    with pytest.raises(GenerationError, match="only the paged engine.*drop --no-paged-kv-cache"):
        pxa.load(gpt[0] + "/gpt.pxa").continuous()
