"""ERNIE 4.5 MoE served: PaddleFormers' Ernie4_5_MoeForCausalLM (experts that differ, a correction bias, shared
experts), whose MoE block calls GPU-only kernels, exported as a Paddle-free artifact and served by
`paddle-xla serve`. Requests of different lengths at once get the live generator's tokens for their prompts
alone, and those are greedy decoding by Paddle eager's forward with the block's routing in CPU ops."""

import numpy as np
import paddle
import pytest
from test_moe_models import _ernie_moe, _ernie_reference, _greedy_by_forward

import paddle_xla as px

from .harness import ServeProcess, greedy_at_once

ROWS, CONTEXT = 4, 40


@pytest.fixture(scope="module")
def ernie(tmp_path_factory):
    """(served folder, the live generator, Paddle eager's reference model)."""
    gen = px.Generator(_ernie_moe().eval(), max_batch_size=ROWS, max_length=CONTEXT, chunk=4)
    folder = tmp_path_factory.mktemp("ernie_moe")
    px.export(gen, str(folder / "ernie_moe.pxa"))
    return str(folder), gen, _ernie_reference().eval()


def test_served_ernie_moe_tokens_are_generates_and_paddles_greedy_tokens(ernie):
    folder, gen, ref = ernie
    rng = np.random.default_rng(4)
    prompts = [[int(i) for i in rng.integers(3, 128, n)] for n in (3, 11, 6, 17, 1, 9)]
    server = ServeProcess(folder)
    try:
        got = greedy_at_once(server, "ernie_moe", prompts, 8)
    finally:
        server.stop()
    server.no_compiles_after_ready()
    alone = [[int(t) for t in gen.generate(np.array([ids]), max_new_tokens=8)[0][0]] for ids in prompts]
    assert got == alone
    for ids, tokens in zip(prompts[:2], got):  # NOTE: eager greedy re-runs the whole sequence per token
        with paddle.no_grad():
            want = _greedy_by_forward(ref, np.array([ids]), 8)[0].tolist()
        assert tokens == want[: len(tokens)] and (len(tokens) == 8 or tokens[-1] == ref.config.eos_token_id)
