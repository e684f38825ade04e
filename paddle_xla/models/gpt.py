"""A GPT-2-style decoder in plain paddle.nn (pre-LayerNorm blocks, causal self-attention, tied LM
head), and its data: a byte-level BPE tokenizer trained on a text corpus that ships with Python,
cut into fixed-length next-token batches. Nothing is downloaded."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.static import InputSpec

from .bert_data import DataError, corpus_sentences, import_validate_extra


@dataclass(frozen=True)
class GPTConfig:
    name: str = "gpt2-small"
    vocab_size: int = 50257
    n_ctx: int = 1024
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    # NOTE: 0 by default, as nanoGPT pretrains: it also makes paddle_xla vs Paddle loss parity exact.
    dropout: float = 0.0
    initializer_range: float = 0.02

    @staticmethod
    def named(name: str, **kw) -> GPTConfig:
        presets = {
            "gpt2-small": GPTConfig(),
            "gpt2-xl": GPTConfig("gpt2-xl", n_layer=48, n_head=25, n_embd=1600),  # GPT-2 1.5B
            "mini": GPTConfig("mini", vocab_size=4096, n_ctx=128, n_layer=4, n_head=4, n_embd=256),
            "tiny": GPTConfig("tiny", vocab_size=512, n_ctx=32, n_layer=2, n_head=2, n_embd=64),
        }
        return replace(presets[name], **kw)


class CausalSelfAttention(nn.Layer):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, causal):
        b, t, c = x.shape
        heads = [
            h.reshape([b, t, self.n_head, c // self.n_head]).transpose([0, 2, 1, 3])
            for h in paddle.split(self.qkv(x), 3, axis=-1)
        ]
        q, k, v = heads
        att = paddle.matmul(q, k, transpose_y=True) * (1.0 / math.sqrt(c // self.n_head))
        att = att + causal  # 0 on and below the diagonal, -1e4 above: no token sees the future
        att = self.drop(F.softmax(att, axis=-1))
        y = paddle.matmul(att, v).transpose([0, 2, 1, 3]).reshape([b, t, c])
        return self.drop(self.proj(y))


class GPTBlock(nn.Layer):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.fc_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, causal):
        x = x + self.attn(self.ln1(x), causal)
        return x + self.drop(self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate=True)))


class GPT(nn.Layer):
    """forward(input_ids [B, T] int64) -> logits [B, T, vocab]."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_ctx, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.LayerList([GPTBlock(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self._init_weights()

    def _init_weights(self):
        cfg = self.config
        normal = nn.initializer.Normal(0.0, cfg.initializer_range)
        # NOTE: GPT-2 scales the residual projections by 1/sqrt(2 * n_layer) so the residual stream's
        # variance does not grow with depth.
        resid = nn.initializer.Normal(0.0, cfg.initializer_range / math.sqrt(2 * cfg.n_layer))
        for name, sub in self.named_sublayers():
            if isinstance(sub, (nn.Linear, nn.Embedding)):
                (resid if name.endswith("proj") else normal)(sub.weight)
            if isinstance(sub, nn.Linear):
                nn.initializer.Constant(0.0)(sub.bias)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        pos = paddle.arange(t, dtype="int64").unsqueeze(0)
        causal = (1.0 - paddle.tril(paddle.ones([t, t], dtype="float32"))) * -1e4
        h = self.drop(self.wte(input_ids) + self.wpe(pos))
        for block in self.blocks:
            h = block(h, causal)
        # NOTE: the LM head is the token embedding itself (tied weights), as in GPT-2.
        return paddle.matmul(self.ln_f(h), self.wte.weight, transpose_y=True)

    @staticmethod
    def input_spec(batch: int | None, seq: int):
        return [InputSpec([batch, seq], "int64", "input_ids")]

    @staticmethod
    def label_spec(batch: int | None, seq: int):
        return [InputSpec([batch, seq], "int64", "labels")]


def lm_loss(logits, labels):
    """Mean next-token cross-entropy over all positions."""
    return F.cross_entropy(logits.reshape([-1, logits.shape[-1]]), labels.reshape([-1]))


# ---- data ------------------------------------------------------------------------------------------
def train_tokenizer(vocab_size: int, sentences: list[str] | None = None):
    """A byte-level BPE tokenizer (GPT-2's scheme) trained on Python's bundled doc topics."""
    tokenizers = import_validate_extra("tokenizers", "the GPT byte-level BPE tokenizer (models/gpt.py)")
    tok = tokenizers.ByteLevelBPETokenizer()
    tok.train_from_iterator(
        sentences or corpus_sentences(),
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    return tok


class TokenStream:
    """The corpus as one long token stream, split 90/10 into train and validation, sampled as
    (input, input shifted by one) windows of `seq` tokens."""

    def __init__(self, tokenizer, cfg: GPTConfig, seq: int, seed: int = 0):
        if tokenizer.get_vocab_size() > cfg.vocab_size:
            raise DataError(
                f"The tokenizer has {tokenizer.get_vocab_size()} tokens but the model's vocab_size is {cfg.vocab_size}."
            )
        if seq > cfg.n_ctx:
            raise DataError(f"seq={seq} is longer than the model's context n_ctx={cfg.n_ctx}.")
        eot = tokenizer.token_to_id("<|endoftext|>")
        ids = [i for e in tokenizer.encode_batch(corpus_sentences()) for i in (*e.ids, eot)]
        data = np.array(ids, dtype="int64")
        if len(data) < 10 * (seq + 1):
            raise DataError(f"The corpus has {len(data)} tokens: too few for windows of {seq + 1}.")
        cut = int(0.9 * len(data))
        self.train, self.val, self.seq = data[:cut], data[cut:], seq
        self.rng = np.random.default_rng(seed)

    def batch(self, batch_size: int, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
        data = self.train if split == "train" else self.val
        starts = self.rng.integers(0, len(data) - self.seq - 1, batch_size)
        x = np.stack([data[s : s + self.seq] for s in starts])
        y = np.stack([data[s + 1 : s + 1 + self.seq] for s in starts])
        return x, y


def greedy_generate(model, prompt_ids: list[int], n_new: int, ctx: int) -> list[int]:
    """Greedy decoding with a compiled model of fixed input shape [1, ctx]: the prompt sits in a
    zero-padded buffer, and the logits at the last real position pick the next token. With the
    causal mask, the padding after it cannot change them, so one executable serves every step."""
    ids = list(prompt_ids)[-ctx:]
    for _ in range(n_new):
        window = ids[-ctx:]
        buf = np.zeros((1, ctx), "int64")
        buf[0, : len(window)] = window
        logits = model(buf)
        ids.append(int(np.argmax(logits[0, len(window) - 1])))
    return ids[len(prompt_ids) :]
