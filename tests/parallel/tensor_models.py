"""Transformer models the tensor-parallel and sharded tests split: their heads, hidden sizes and
vocabularies divide by 4 and 16 (to_static needs them in a file)."""

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.static import InputSpec
from zoo import BertLikeEncoder, GPTDecoder

SEQ = 8


class EncoderClassifier(nn.Layer):
    """BERT-style: word/position/type embeddings, 2 post-LN encoder layers of 4 heads, a pooler, a head."""

    def __init__(self):
        super().__init__()
        self.bert = BertLikeEncoder(vocab=256, hidden=64, layers=2, heads=4, ffn=128, max_pos=32, dropout=0.0)
        self.head = nn.Linear(64, 4)

    def forward(self, ids, types, mask):
        _, pooled = self.bert(ids, types, mask)
        return self.head(pooled)

    @staticmethod
    def specs():
        return [InputSpec([None, SEQ], "int64", n) for n in ("ids", "types", "mask")]


class DecoderLM(nn.Layer):
    """GPT-style: pre-LN blocks of 4 heads with a fused qkv projection, the LM head tied to the
    token embedding; forward returns the mean next-token loss."""

    def __init__(self):
        super().__init__()
        self.gpt = GPTDecoder(vocab=256, hidden=64, layers=2, heads=4, max_pos=32, dropout=0.0)

    def forward(self, ids, labels):
        logits = self.gpt(ids)
        return F.cross_entropy(logits.reshape([-1, 256]), labels.reshape([-1, 1])).mean()

    @staticmethod
    def specs():
        return [InputSpec([None, SEQ], "int64", "ids"), InputSpec([None, SEQ], "int64", "labels")]


def _biased(net):
    """Every Linear's bias drawn large (Paddle starts them at zero): a bias that a layout splits wrongly,
    or leaves whole beside its column-split weight, then moves the numbers, not only the plan."""
    rng = np.random.default_rng(5)
    for layer in net.sublayers():
        if isinstance(layer, nn.Linear) and layer.bias is not None:
            layer.bias.set_value(rng.normal(0.0, 0.5, layer.bias.shape).astype("float32"))
    return net


def setup(kind: str):
    """(net, optimizer, input specs, label specs, loss_fn) with fixed weights."""
    paddle.seed(11)
    if kind == "encoder":
        net = _biased(EncoderClassifier())
        # NOTE: momentum, not Adam: the attention's key bias has an exactly-zero gradient, whose rounding
        # noise Adam-like rules turn into full-size steps (parallel/helpers.py says the same).
        opt = paddle.optimizer.Momentum(
            0.05,
            momentum=0.9,
            parameters=net.parameters(),
            weight_decay=paddle.regularizer.L2Decay(1e-4),
            grad_clip=nn.ClipGradByGlobalNorm(1.0),
        )
        return net, opt, EncoderClassifier.specs(), [InputSpec([None], "int64", "label")], nn.CrossEntropyLoss()
    net = _biased(DecoderLM())
    opt = paddle.optimizer.Momentum(0.05, momentum=0.9, parameters=net.parameters())
    return net, opt, DecoderLM.specs(), [], None


def plan_target():
    """What `paddle-xla plan tests.parallel.tensor_models:plan_target` builds (under paddle.LazyGuard())."""
    net, opt, specs, labels, loss = setup("decoder")
    return {"net": net, "input_spec": specs, "optimizer": opt}
