"""Small and full-size Paddle models the parity tests and benchmarks capture.

Plain paddle.nn code, as a user would write it."""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.static import InputSpec


class BertLikeEncoder(nn.Layer):
    """Embeddings + LayerNorm + TransformerEncoder(gelu) + pooler, with an attention mask."""

    def __init__(self, vocab=1000, hidden=64, layers=2, heads=4, ffn=128, max_pos=128, dropout=0.1):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(max_pos, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(
            hidden, heads, ffn, dropout=dropout, activation="gelu", attn_dropout=dropout, act_dropout=0.0
        )
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.pool = nn.Linear(hidden, hidden)

    def forward(self, input_ids, token_type_ids, attention_mask):
        seq = paddle.shape(input_ids)[1]
        pos_ids = paddle.arange(seq, dtype="int64").unsqueeze(0)
        h = self.word(input_ids) + self.pos(pos_ids) + self.token_type(token_type_ids)
        h = self.drop(self.norm(h))
        mask = (1.0 - attention_mask.unsqueeze([1, 2]).astype("float32")) * -1e4
        h = self.encoder(h, mask)
        pooled = paddle.tanh(self.pool(h[:, 0]))
        return h, pooled

    @staticmethod
    def specs():
        return [
            InputSpec([None, None], "int64", "input_ids"),
            InputSpec([None, None], "int64", "token_type_ids"),
            InputSpec([None, None], "int64", "attention_mask"),
        ]

    @staticmethod
    def inputs(batch=2, seq=16, vocab=1000, seed=0):
        rng = np.random.default_rng(seed)
        ids = rng.integers(0, vocab, (batch, seq)).astype("int64")
        types = rng.integers(0, 2, (batch, seq)).astype("int64")
        mask = np.ones((batch, seq), "int64")
        mask[:, seq - 3 :] = 0
        return [ids, types, mask]


class GPTDecoder(nn.Layer):
    """A GPT-style decoder: token+position embeddings, causal self-attention, tied LM head."""

    def __init__(self, vocab=500, hidden=64, layers=2, heads=4, max_pos=64, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(max_pos, hidden)
        self.blocks = nn.LayerList([GPTBlock(hidden, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, ids):
        t = ids.shape[1]
        pos = paddle.arange(0, t, dtype="int64")
        h = self.wte(ids) + self.wpe(pos)
        causal = paddle.tril(paddle.ones([t, t], dtype="bool"))
        for blk in self.blocks:
            h = blk(h, causal)
        h = self.ln_f(h)
        return paddle.matmul(h, self.wte.weight, transpose_y=True)

    @staticmethod
    def specs(seq=16):
        return [InputSpec([None, seq], "int64", "ids")]

    @staticmethod
    def inputs(batch=2, seq=16, vocab=500, seed=0):
        return [np.random.default_rng(seed).integers(0, vocab, (batch, seq)).astype("int64")]


class GPTBlock(nn.Layer):
    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, causal):
        b, t, c = x.shape
        q, k, v = paddle.split(self.qkv(self.ln1(x)), 3, axis=-1)
        q = q.reshape([b, t, self.heads, c // self.heads]).transpose([0, 2, 1, 3])
        k = k.reshape([b, t, self.heads, c // self.heads]).transpose([0, 2, 1, 3])
        v = v.reshape([b, t, self.heads, c // self.heads]).transpose([0, 2, 1, 3])
        att = paddle.matmul(q, k, transpose_y=True) / float(np.sqrt(c // self.heads))
        att = paddle.where(causal, att, paddle.full_like(att, -1e9))
        att = self.drop(F.softmax(att, axis=-1))
        y = paddle.matmul(att, v).transpose([0, 2, 1, 3]).reshape([b, t, c])
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate=True)))


class SpeechLSTM(nn.Layer):
    """An LSTM/GRU acoustic model: features -> BiLSTM -> GRU -> per-frame logits."""

    def __init__(self, feat=16, hidden=32, classes=10):
        super().__init__()
        self.lstm = nn.LSTM(feat, hidden, num_layers=2, direction="bidirect")
        self.gru = nn.GRU(2 * hidden, hidden)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x):
        h, _ = self.lstm(x)
        h, _ = self.gru(h)
        return F.log_softmax(self.out(h), axis=-1)

    @staticmethod
    def specs():
        return [InputSpec([None, 20, 16], "float32", "feats")]

    @staticmethod
    def inputs(batch=2, seed=0):
        return [np.random.default_rng(seed).standard_normal((batch, 20, 16)).astype("float32")]


class FunctionalMix(nn.Layer):
    """The functional ops users write by hand."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, label):
        h = self.fc(x)  # [B, 8]
        a, b = paddle.split(h, 2, axis=1)
        h = paddle.concat([b, a], axis=1)
        h = paddle.where(h > 0, h, h * 0.1).astype("float32")
        idx = paddle.argmax(h, axis=1)
        top_v, top_i = paddle.topk(h, k=3, axis=1)
        g = paddle.gather(h, paddle.to_tensor([0, 2, 4]), axis=1)
        c = paddle.cumsum(h, axis=1)
        oh = F.one_hot(label, num_classes=8)
        e = paddle.expand(paddle.arange(8, dtype="float32").unsqueeze(0), [h.shape[0], 8])
        t = paddle.tile(g, [1, 2])
        img = h.reshape([-1, 2, 2, 2])
        img = F.pad(img, [1, 1, 1, 1])
        img = F.interpolate(img, scale_factor=2, mode="nearest")
        img = F.interpolate(img, size=[5, 5], mode="bilinear", align_corners=False)
        flat = paddle.flatten(img, start_axis=1)
        s = paddle.squeeze(paddle.unsqueeze(flat, 1), 1).sum(axis=1, keepdim=True)
        loss1 = F.softmax_with_cross_entropy(h, label.unsqueeze(1))
        loss2 = F.cross_entropy(h, label, reduction="none")
        eq = (idx == label).astype("float32")
        mix = (c + oh + e).mean(axis=1, keepdim=True) + t.max(axis=1, keepdim=True) + top_v.sum(1, keepdim=True)
        return mix + s + loss1 + loss2.unsqueeze(1) + eq.unsqueeze(1) + top_i.astype("float32").mean(1, keepdim=True)

    @staticmethod
    def specs():
        return [InputSpec([None, 8], "float32", "x"), InputSpec([None], "int64", "label")]

    @staticmethod
    def inputs(batch=4, seed=0):
        rng = np.random.default_rng(seed)
        return [rng.standard_normal((batch, 8)).astype("float32"), rng.integers(0, 8, (batch,)).astype("int64")]


def vision_specs(size=224):
    return [InputSpec([None, 3, size, size], "float32", "x")]


def vision_inputs(batch=2, size=224, seed=0):
    return [np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype("float32")]


def build(name: str, seed: int = 0):
    """(layer, input_spec, inputs) for a zoo model by name, with seeded weights."""
    paddle.seed(seed)
    if name in ("resnet50", "mobilenet_v2", "vgg16", "resnet18"):
        net = getattr(paddle.vision.models, name)()
        size = 64 if name != "vgg16" else 32
        return net, vision_specs(size), vision_inputs(2, size, seed)
    cls = {"bert": BertLikeEncoder, "gpt": GPTDecoder, "lstm": SpeechLSTM, "functional": FunctionalMix}[name]
    net = cls()
    return net, cls.specs(), cls.inputs(seed=seed)


ZOO = ["resnet50", "mobilenet_v2", "vgg16", "bert", "gpt", "lstm", "functional"]
