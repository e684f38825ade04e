"""A KV cache derived from a plain paddle.nn decoder that has no cache API (generation/derive.py):
models/gpt.py, models/llama.py and an nn.TransformerEncoder under a causal mask, against Paddle eager
running the whole forward for every new token."""

import math

import jax
import numpy as np
import paddle
import pytest

import paddle_xla as px
import paddle_xla.artifact as pxa
from paddle_xla import x64
from paddle_xla.api.generator import Generator
from paddle_xla.errors import GenerationError
from paddle_xla.generation import derive
from paddle_xla.generation.batch_engine import program
from paddle_xla.generation.continuous import Request
from paddle_xla.models.gpt import GPT, GPTConfig
from paddle_xla.models.llama import Llama, LlamaConfig
from paddle_xla.runtime.compile_cache import compiles_seen

from .test_continuous import _alone
from .test_paged import serve

VOCAB, BATCH, SLOTS = 96, 3, 40


class CausalEncoderLM(paddle.nn.Layer):
    """Token and learned position embeddings, nn.TransformerEncoder under its square subsequent mask."""

    def __init__(self, d=32, heads=4, layers=2):
        super().__init__()
        self.tok, self.pos = paddle.nn.Embedding(VOCAB, d), paddle.nn.Embedding(64, d)
        layer = paddle.nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, normalize_before=True)
        self.encoder = paddle.nn.TransformerEncoder(layer, layers)
        self.head = paddle.nn.Linear(d, VOCAB)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        h = self.tok(input_ids) + self.pos(paddle.arange(t, dtype="int64"))
        # NOTE: nn.Transformer.generate_square_subsequent_mask's mask: -inf above the diagonal
        causal = paddle.triu(paddle.full([t, t], float("-inf"), dtype="float32"), 1)
        return self.head(self.encoder(h, src_mask=causal))


class CumsumMixer(paddle.nn.Layer):
    """Causal, but its running mean over time mixes positions outside attention: not derivable."""

    def __init__(self, d=16):
        super().__init__()
        self.emb, self.qkv, self.head = (
            paddle.nn.Embedding(VOCAB, d),
            paddle.nn.Linear(d, 3 * d),
            paddle.nn.Linear(d, VOCAB),
        )

    def forward(self, input_ids):
        t = input_ids.shape[1]
        h = paddle.cumsum(self.emb(input_ids), axis=1)
        q, k, v = (x.unsqueeze(1) for x in paddle.split(self.qkv(h), 3, axis=-1))
        causal = (1.0 - paddle.tril(paddle.ones([t, t], dtype="float32"))) * -1e4
        att = paddle.nn.functional.softmax(paddle.matmul(q, k, transpose_y=True) / math.sqrt(16) + causal, axis=-1)
        return self.head(paddle.matmul(att, v).squeeze(1))


def _build(name):
    paddle.seed(1)
    net = {
        "gpt": lambda: GPT(GPTConfig.named("tiny", vocab_size=VOCAB, n_ctx=64)),
        "llama": lambda: Llama(LlamaConfig.named("tiny", vocab_size=VOCAB)),
        "encoder": CausalEncoderLM,
    }[name]()
    net.eval()
    return net


@pytest.fixture(scope="module", params=["gpt", "llama", "encoder"])
def built(request):
    net = _build(request.param)
    return net, Generator(net, max_batch_size=BATCH, max_length=SLOTS, chunk=4)


def _eager_greedy(net, ids, n):
    x = ids
    with paddle.no_grad():
        for _ in range(n):
            nxt = net(paddle.to_tensor(x))[:, -1].argmax(-1).numpy()
            x = np.concatenate([x, nxt[:, None].astype("int64")], axis=1)
    return x[:, ids.shape[1] :]


def _prompts(batch, length, seed=0):
    return np.random.default_rng(seed).integers(0, VOCAB, (batch, length)).astype("int64")


@pytest.mark.parametrize("batch,length,new", [(3, 7, 10), (2, 20, 6), (1, 1, 12)])
def test_greedy_equals_paddles_whole_forward_per_token(built, batch, length, new):
    net, gen = built
    ids = _prompts(batch, length, seed=length)
    got, _ = gen.generate(ids, max_new_tokens=new)
    np.testing.assert_array_equal(got, _eager_greedy(net, ids, new))


def test_the_decode_step_reads_a_cache_and_compiles_once(built):
    net, gen = built
    ops = [op.name for op in gen.decode_captured.graph.ops()]
    # NOTE: each cache entry appended to its attention operand as a cache class appends it (a concat along the
    # slots), which the grouped products read in parts with fixed-order sums
    assert ops.count("paddle_xla.cache_entry") == 2 * gen.geometry.layers == 4
    assert gen.decode_captured.graph.feeds[-1].shape == (4, BATCH, gen.geometry.kv_heads, SLOTS, gen.geometry.head_dim)
    gen.generate(_prompts(2, 5), max_new_tokens=4)  # warm-up: bucket 16
    with compiles_seen() as compiles:
        for length, new in [(9, 3), (16, 17), (2, 9)]:
            gen.generate(_prompts(3, length, seed=new), max_new_tokens=new)
    assert not compiles, f"{len(compiles)} compiles after warm-up"


def test_prompts_of_different_lengths_go_together_each_at_its_own_positions(built):
    # NOTE: generate runs a derived program one row at a time, so rows need not share their positions
    net, gen = built
    ids = _prompts(3, 9, seed=4)
    mask = np.array([[0] * 5 + [1] * 4, [1] * 9, [0] * 7 + [1] * 2])
    got, _ = gen.generate(ids, attention_mask=mask, max_new_tokens=6)
    for row, m, tokens in zip(ids, mask, got):
        np.testing.assert_array_equal(tokens, _eager_greedy(net, row[m == 1][None], 6)[0])


def test_a_model_mixing_positions_outside_attention_is_refused():
    paddle.seed(0)
    net = CumsumMixer()
    net.eval()
    with pytest.raises(GenerationError, match="does not reproduce it.*cumsum"):
        Generator(net, max_batch_size=1, max_length=24)


def test_a_derived_generator_exports_and_runs_without_the_model(tmp_path):
    net = _build("gpt")
    gen = Generator(net, max_batch_size=2, max_length=24, strategy=px.Strategy(precision="bf16"))
    path = str(tmp_path / "gpt.pxa")
    px.export(gen, path)
    art = pxa.load(path)
    ids = _prompts(2, 5, seed=9)
    np.testing.assert_array_equal(art.generate(ids, max_new_tokens=7)[0], gen.generate(ids, max_new_tokens=7)[0])
    # NOTE: its executables run the prefill row after row and the decode step per row, as the live generator
    mask = np.array([[1] * 5, [0] + [1] * 4])
    for got, want in zip(
        art.generate(ids, attention_mask=mask, max_new_tokens=7),
        gen.generate(ids, attention_mask=mask, max_new_tokens=7),
    ):
        np.testing.assert_array_equal(got, want)


def test_one_rows_decode_step_gives_each_row_its_numbers_at_its_own_position_over_any_slots(built):
    # NOTE: a server's paged engine runs the derived step per row (derive.per_row) over the blocks its rows
    # fill: a row's logits and K/V are the same bits whatever the slots and whatever the other rows' positions
    _, gen = built
    g = gen.geometry
    step = jax.jit(derive.per_row(program(gen.any_bucket_captured().graph, gen.policy, gen.held)))
    weights = gen.held.all_prepared(gen.source_weights)
    rng = np.random.default_rng(0)
    past = rng.standard_normal((2 * g.layers, BATCH, g.kv_heads, SLOTS, g.head_dim)).astype(np.float32)
    ids = _prompts(BATCH, 1)
    filled = np.array([13, 5, 22])
    mask = (np.arange(SLOTS + 1)[None, :] < filled[:, None]) | (np.arange(SLOTS + 1) == SLOTS)[None, :]
    with x64.scope():
        want = step(weights, ids, mask.astype(np.int64), filled[:, None], past)
        for slots in (24, 32):
            m = np.concatenate([mask[:, :slots], mask[:, -1:]], axis=1).astype(np.int64)
            got = step(weights, ids, m, filled[:, None], past[:, :, :, :slots])
            for a, b in zip(got, want):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        alone = step(
            weights,
            ids[1:2].repeat(BATCH, 0),
            np.repeat(mask[1:2], BATCH, 0).astype(np.int64),
            np.full((BATCH, 1), filled[1]),
            past[:, 1:2].repeat(BATCH, 1),
        )
        np.testing.assert_array_equal(np.asarray(alone[0])[0], np.asarray(want[0])[1])


def test_a_paged_engine_serves_a_plain_decoder_with_generates_tokens(built):
    # NOTE: requests of 1-27 tokens at their own positions beside each other, in blocks of 8 (2 to 5 a
    # request, so decode chunks run over several block buckets), greedy and seeded sampling
    _, gen = built
    engine = gen.paged(block_size=8)
    rng = np.random.default_rng(5)
    requests = []
    for _ in range(7):
        ids = tuple(int(i) for i in rng.integers(3, VOCAB, rng.integers(1, 28)))
        requests.append(Request(ids, min(int(rng.integers(2, 14)), SLOTS - len(ids) + 1)))
    requests.append(Request(requests[0].ids, 8, decode_strategy="sampling", top_p=0.8, seed=11))
    got, buckets, most = serve(engine, requests)
    assert most == BATCH and len({blocks for _, blocks in buckets}) >= 2, (most, buckets)
    for i, r in enumerate(requests):
        assert got[i] == _alone(gen, r, **({"seed": r.seed} if r.seed is not None else {})), (i, r)
    assert engine.blocks.free_blocks == engine.blocks.num_blocks - 1
    with pytest.raises(GenerationError, match="only the paged engine.*drop --no-paged-kv-cache"):
        gen.continuous()
