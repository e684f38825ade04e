"""BERT in plain paddle.nn (the layout of PaddleNLP's BertModel), with pretraining and classification
heads. Weights use Paddle's usual BERT init: normal(0, 0.02), LayerNorm 1/0."""

from __future__ import annotations

from dataclasses import dataclass

import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.static import InputSpec


@dataclass(frozen=True)
class BertConfig:
    name: str = "base"
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12

    @staticmethod
    def base(**kw) -> BertConfig:
        return BertConfig(**kw)

    @staticmethod
    def small(**kw) -> BertConfig:
        return BertConfig(
            **{
                **dict(
                    name="small", hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024
                ),
                **kw,
            }
        )

    @staticmethod
    def large(**kw) -> BertConfig:
        return BertConfig(
            **{
                **dict(
                    name="large", hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
                ),
                **kw,
            }
        )

    @staticmethod
    def tiny(**kw) -> BertConfig:
        return BertConfig(
            **{
                **dict(
                    name="tiny",
                    vocab_size=1000,
                    hidden_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=2,
                    intermediate_size=256,
                    max_position_embeddings=128,
                ),
                **kw,
            }
        )

    @staticmethod
    def named(name: str, **kw) -> BertConfig:
        return {"base": BertConfig.base, "large": BertConfig.large, "small": BertConfig.small, "tiny": BertConfig.tiny}[
            name
        ](**kw)

    def without_dropout(self) -> BertConfig:
        return BertConfig(**{**self.__dict__, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})


def _init_weights(layer: nn.Layer, std: float) -> None:
    normal = nn.initializer.Normal(0.0, std)
    for sub in layer.sublayers(include_self=True):
        if isinstance(sub, (nn.Linear, nn.Embedding)):
            normal(sub.weight)
        if isinstance(sub, nn.Linear) and sub.bias is not None:
            nn.initializer.Constant(0.0)(sub.bias)


class BertEmbeddings(nn.Layer):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.layer_norm = nn.LayerNorm(cfg.hidden_size, epsilon=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids):
        seq = paddle.shape(input_ids)[1]
        position_ids = paddle.arange(seq, dtype="int64").unsqueeze(0)
        h = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        h = h + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.layer_norm(h))


class BertModel(nn.Layer):
    """Returns (sequence_output [B,S,H], pooled_output [B,H])."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = BertEmbeddings(cfg)
        layer = nn.TransformerEncoderLayer(
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.intermediate_size,
            dropout=cfg.hidden_dropout_prob,
            activation="gelu",
            attn_dropout=cfg.attention_probs_dropout_prob,
            act_dropout=0.0,
        )
        self.encoder = nn.TransformerEncoder(layer, cfg.num_hidden_layers)
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        _init_weights(self, cfg.initializer_range)

    def forward(self, input_ids, token_type_ids, attention_mask=None):
        if attention_mask is None:
            # NOTE: PaddleNLP's convention: padding is token id 0 when no mask is given.
            attention_mask = (input_ids != 0).astype("int64")
        mask = (1.0 - attention_mask.unsqueeze([1, 2]).astype("float32")) * -1e4
        h = self.encoder(self.embeddings(input_ids, token_type_ids), mask)
        return h, paddle.tanh(self.pooler(h[:, 0]))

    @staticmethod
    def input_spec(seq: int | None = None, with_mask: bool = False):
        specs = [InputSpec([None, seq], "int64", "input_ids"), InputSpec([None, seq], "int64", "token_type_ids")]
        return specs + ([InputSpec([None, seq], "int64", "attention_mask")] if with_mask else [])


class BertForPretraining(nn.Layer):
    """MLM + NSP heads; forward returns the summed pretraining loss. MLM labels use -100 for
    positions that are not masked.

    Without `masked_positions` the MLM head scores every token (mlm_labels [B, S]). With them
    ([B, P] int64, each row the positions of that sequence's masked tokens, padded with any position
    whose label is -100) it scores only those P tokens (mlm_labels [B, P]), as PaddleNLP's
    BertPretrainingHeads and Graphcore's and NVIDIA's BERT do (max_predictions_per_seq: 20 at seq 128).
    The decoder over the vocabulary is most of the head's cost, so this is the usual pretraining setup."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.bert = BertModel(cfg)
        self.transform = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.transform_norm = nn.LayerNorm(cfg.hidden_size, epsilon=cfg.layer_norm_eps)
        self.decoder_bias = self.create_parameter([cfg.vocab_size], is_bias=True)
        self.nsp = nn.Linear(cfg.hidden_size, 2)
        _init_weights(self.transform, cfg.initializer_range)
        _init_weights(self.nsp, cfg.initializer_range)

    def logits(self, input_ids, token_type_ids, masked_positions=None):
        seq, pooled = self.bert(input_ids, token_type_ids)
        if masked_positions is not None:
            # broadcast=True spreads the [B, P, 1] positions over the hidden axis.
            seq = paddle.take_along_axis(seq, masked_positions.unsqueeze(-1), axis=1, broadcast=True)
        h = self.transform_norm(F.gelu(self.transform(seq)))
        w = self.bert.embeddings.word_embeddings.weight  # tied decoder, as in BERT
        mlm = paddle.matmul(h, w, transpose_y=True) + self.decoder_bias
        return mlm, self.nsp(pooled)

    def forward(self, input_ids, token_type_ids, mlm_labels, nsp_labels, masked_positions=None):
        mlm, nsp = self.logits(input_ids, token_type_ids, masked_positions)
        mlm_loss = F.cross_entropy(mlm.reshape([-1, mlm.shape[-1]]), mlm_labels.reshape([-1]), ignore_index=-100)
        nsp_loss = F.cross_entropy(nsp, nsp_labels)
        return mlm_loss + nsp_loss

    @staticmethod
    def input_spec(seq: int | None = None, max_predictions: int | None = None):
        """Specs for forward's arguments; `max_predictions` adds masked_positions (and shapes
        mlm_labels [B, max_predictions])."""
        labelled = max_predictions if max_predictions else seq
        specs = BertModel.input_spec(seq) + [
            InputSpec([None, labelled], "int64", "mlm_labels"),
            InputSpec([None], "int64", "nsp_labels"),
        ]
        if max_predictions:
            specs.append(InputSpec([None, max_predictions], "int64", "masked_positions"))
        return specs


class BertForSequenceClassification(nn.Layer):
    def __init__(self, cfg: BertConfig, num_classes: int = 2):
        super().__init__()
        self.bert = BertModel(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.classifier = nn.Linear(cfg.hidden_size, num_classes)
        _init_weights(self.classifier, cfg.initializer_range)

    def forward(self, input_ids, token_type_ids):
        _, pooled = self.bert(input_ids, token_type_ids)
        return self.classifier(self.dropout(pooled))
