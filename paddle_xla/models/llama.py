"""A Llama-style decoder in plain paddle.nn: RMSNorm, rotary position embeddings, SwiGLU MLPs, an
untied LM head, and the projection names of PaddleNLP's LlamaForCausalLM (q_proj/k_proj/v_proj/o_proj,
gate_proj/up_proj/down_proj, embed_tokens). The planner sizes the 7B shape built under
paddle.LazyGuard(); small configs train and match Paddle like the other models."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.static import InputSpec


@dataclass(frozen=True)
class LlamaConfig:
    name: str = "llama-7b"
    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0

    @staticmethod
    def named(name: str, **kw) -> LlamaConfig:
        presets = {
            "llama-7b": LlamaConfig(),
            "tiny": LlamaConfig(
                "tiny",
                vocab_size=256,
                hidden_size=64,
                intermediate_size=160,
                num_hidden_layers=2,
                num_attention_heads=4,
            ),
        }
        return replace(presets[name], **kw)


class RMSNorm(nn.Layer):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = self.create_parameter([size], default_initializer=nn.initializer.Constant(1.0))

    def forward(self, x):
        return x * paddle.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + paddle.concat([-x2, x1], axis=-1) * sin


class Attention(nn.Layer):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        h = cfg.hidden_size
        self.heads, self.head_dim = cfg.num_attention_heads, h // cfg.num_attention_heads
        self.q_proj = nn.Linear(h, h, bias_attr=False)
        self.k_proj = nn.Linear(h, h, bias_attr=False)
        self.v_proj = nn.Linear(h, h, bias_attr=False)
        self.o_proj = nn.Linear(h, h, bias_attr=False)

    def forward(self, x, cos, sin, causal):
        b, t, _ = x.shape
        shape = [b, t, self.heads, self.head_dim]
        q, k, v = (p(x).reshape(shape).transpose([0, 2, 1, 3]) for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        att = F.softmax(paddle.matmul(q, k, transpose_y=True) / math.sqrt(self.head_dim) + causal, axis=-1)
        return self.o_proj(paddle.matmul(att, v).transpose([0, 2, 1, 3]).reshape([b, t, -1]))


class MLP(nn.Layer):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        h, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(h, f, bias_attr=False)
        self.up_proj = nn.Linear(h, f, bias_attr=False)
        self.down_proj = nn.Linear(f, h, bias_attr=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Layer):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, causal):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, causal)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Layer):
    """forward(input_ids [B, T] int64) -> logits [B, T, vocab]."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.LayerList([DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias_attr=False)

    def forward(self, input_ids):
        cfg = self.config
        t = input_ids.shape[1]
        dim = cfg.hidden_size // cfg.num_attention_heads
        inv = 1.0 / (cfg.rope_theta ** (paddle.arange(0, dim, 2, dtype="float32") / dim))
        angles = paddle.arange(t, dtype="float32").unsqueeze(1) * inv.unsqueeze(0)
        angles = paddle.concat([angles, angles], axis=-1)
        cos, sin = angles.cos(), angles.sin()
        causal = (1.0 - paddle.tril(paddle.ones([t, t], dtype="float32"))) * -1e4
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h, cos, sin, causal)
        return self.lm_head(self.norm(h))

    @staticmethod
    def input_spec(seq: int):
        return [InputSpec([None, seq], "int64", "input_ids")]


class LlamaForCausalLM(nn.Layer):
    """forward(input_ids, labels) -> the mean next-token cross-entropy."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.llama = Llama(cfg)

    def forward(self, input_ids, labels):
        logits = self.llama(input_ids)
        return F.cross_entropy(logits.reshape([-1, self.llama.config.vocab_size]), labels.reshape([-1, 1])).mean()

    @staticmethod
    def input_spec(seq: int):
        return [InputSpec([None, seq], "int64", "input_ids"), InputSpec([None, seq], "int64", "labels")]
