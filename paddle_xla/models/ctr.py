"""Click-through-rate prediction: DeepFM (a factorisation machine and an MLP over shared embeddings)
in plain paddle.nn, and a synthetic tabular task with a known answer (sparse categorical fields of
power-law popularity, dense features, clicks drawn from a hidden FM-plus-nonlinearity model)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import paddle
import paddle.nn as nn
from paddle.static import InputSpec


@dataclass(frozen=True)
class CTRConfig:
    name: str = "criteo-like"
    field_sizes: tuple[int, ...] = (100,) * 20 + (2000,) * 6  # 26 categorical fields, as in Criteo
    n_dense: int = 13
    embed_dim: int = 16
    hidden: tuple[int, ...] = (400, 400, 400)

    @staticmethod
    def named(name: str) -> CTRConfig:
        return {"criteo-like": CTRConfig(), "tiny": CTRConfig("tiny", (20,) * 6 + (100,) * 2, 4, 8, (64, 32))}[name]

    @property
    def n_ids(self) -> int:
        return sum(self.field_sizes)


class DeepFM(nn.Layer):
    """forward(ids [B, fields] int64, global ids; dense [B, n_dense] float32) -> click logit [B, 1];
    sigmoid(logit) is P(click)."""

    def __init__(self, cfg: CTRConfig):
        super().__init__()
        self.first_order = nn.Embedding(cfg.n_ids, 1)  # a weight per categorical value
        self.dense_linear = nn.Linear(cfg.n_dense, 1)  # a weight per dense feature, and the bias
        self.embedding = nn.Embedding(cfg.n_ids, cfg.embed_dim, weight_attr=nn.initializer.Normal(0, 0.01))
        sizes = [len(cfg.field_sizes) * cfg.embed_dim + cfg.n_dense, *cfg.hidden]
        layers = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.deep = nn.Sequential(*layers, nn.Linear(sizes[-1], 1))

    def forward(self, ids, dense):
        linear = self.first_order(ids).sum(axis=1) + self.dense_linear(dense)  # [B, 1]
        e = self.embedding(ids)  # [B, F, k]
        # NOTE: the FM identity: sum over pairs i<j of <e_i, e_j> = ((sum e)^2 - sum e^2) / 2, in O(F k).
        fm = 0.5 * (e.sum(axis=1).square() - e.square().sum(axis=1)).sum(axis=1, keepdim=True)
        deep = self.deep(paddle.concat([e.flatten(1), dense], axis=1))
        # NOTE: a logit, not a probability: BCEWithLogitsLoss stays exact where the probability
        # rounds to 0 or 1, which a confident CTR model reaches.
        return linear + fm + deep

    @staticmethod
    def input_spec(cfg: CTRConfig, batch: int | None = None):
        return [
            InputSpec([batch, len(cfg.field_sizes)], "int64", "ids"),
            InputSpec([batch, cfg.n_dense], "float32", "dense"),
        ]

    @staticmethod
    def label_spec(batch: int | None = None):
        return [InputSpec([batch, 1], "float32", "click")]


class SyntheticCTR:
    """A hidden ground truth to sample impressions from: per-value weights and latent vectors,
    dense coefficients and one dense-feature interaction the model has to learn."""

    def __init__(self, cfg: CTRConfig, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.cfg = cfg
        self.offsets = np.concatenate([[0], np.cumsum(cfg.field_sizes)[:-1]]).astype("int64")
        self.weight = rng.normal(0, 0.4, cfg.n_ids)
        self.latent = rng.normal(0, 0.25, (cfg.n_ids, 4))
        self.beta = rng.normal(0, 0.5, cfg.n_dense)
        # NOTE: value popularity follows a power law, as real ids (users, ads, sites) do.
        self.popularity = [1.0 / np.arange(1, n + 1) ** 1.1 for n in cfg.field_sizes]
        self.popularity = [p / p.sum() for p in self.popularity]

    def sample(self, n: int, seed: int):
        """(ids [n, F] int64, dense [n, D] float32, click [n, 1] float32, true P(click) [n])."""
        rng = np.random.default_rng(seed)
        local = np.stack([rng.choice(len(p), n, p=p) for p in self.popularity], axis=1)
        ids = local + self.offsets
        dense = rng.standard_normal((n, self.cfg.n_dense)).astype("float32")
        v = self.latent[ids]
        pairs = 0.5 * ((v.sum(1) ** 2) - (v**2).sum(1)).sum(1)
        score = self.weight[ids].sum(1) + pairs + dense @ self.beta + np.tanh(dense[:, 0] * dense[:, 1]) - 1.5
        prob = 1.0 / (1.0 + np.exp(-score))
        click = (rng.random(n) < prob).astype("float32")[:, None]
        return ids.astype("int64"), dense, click, prob


class Impressions(paddle.io.Dataset):
    def __init__(self, ids, dense, click):
        super().__init__()
        self.ids, self.dense, self.click = ids, dense, click

    def __getitem__(self, i):
        return self.ids[i], self.dense[i], self.click[i]

    def __len__(self):
        return len(self.click)
