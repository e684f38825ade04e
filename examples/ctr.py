"""Click-through-rate prediction (recommendation, ads, finance scoring): DeepFM with px.Model.fit.

    python examples/ctr.py           # Criteo-shaped: 26 categorical fields (14k ids), 13 dense features
    python examples/ctr.py --tiny    # 8 fields, 4 dense features (CI)

The data is synthetic and tabular: categorical ids of power-law popularity plus dense features, with
clicks drawn from a hidden model, so the best possible AUC (the "oracle", which knows the true click
probability) is known and the model's AUC can be read against it.

1. Fit DeepFM with px.Model (Adam, binary cross-entropy on logits, paddle.metric.Auc).
2. Fit a copy with native paddle.Model for a few batches from the same weights; compare the losses.
3. Evaluate the AUC on held-out impressions, next to the oracle's.
"""

import argparse
import copy
import time

import numpy as np
import paddle

import paddle_xla as px
from paddle_xla.models.ctr import CTRConfig, DeepFM, Impressions, SyntheticCTR

CONFIGS = {
    "tiny": dict(model="tiny", train=8192, test=4096, batch=256, epochs=2, lr=3e-3, compare=4),
    "full": dict(model="criteo-like", train=400_000, test=50_000, batch=1024, epochs=5, lr=1e-3, compare=4),
}


class ClickAuc(paddle.metric.Auc):
    """paddle.metric.Auc reads column 1 of [P(no click), P(click)]; DeepFM gives the click logit."""

    def compute(self, logit, click):
        prob = paddle.nn.functional.sigmoid(logit)
        return paddle.concat([1 - prob, prob], axis=1), click


class LossHistory(paddle.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_batch_end(self, step, logs=None):
        self.losses.append(float(np.asarray(logs["loss"]).reshape(-1)[0]))


def prepared(model_cls, net, cfg, c):
    model = model_cls(net, DeepFM.input_spec(cfg), DeepFM.label_spec())
    model.prepare(
        paddle.optimizer.Adam(c["lr"], parameters=net.parameters()), paddle.nn.BCEWithLogitsLoss(), ClickAuc()
    )
    return model


def oracle_auc(prob, click):
    auc = paddle.metric.Auc()
    auc.update(np.stack([1 - prob, prob], axis=1), click)
    return auc.accumulate()


def main(tiny=False, seed=0):
    c = CONFIGS["tiny" if tiny else "full"]
    cfg = CTRConfig.named(c["model"])
    task = SyntheticCTR(cfg, seed)
    *train, _ = task.sample(c["train"], seed + 1)  # [ids, dense, click]; true P(click) unused
    *test, test_prob = task.sample(c["test"], seed + 2)
    print(
        f"DeepFM '{cfg.name}': {len(cfg.field_sizes)} fields ({cfg.n_ids:,} ids), {cfg.n_dense} dense; "
        f"{c['train']:,} training impressions, click rate {train[2].mean():.3f}"
    )

    paddle.seed(seed)
    net = DeepFM(cfg)
    native_net = copy.deepcopy(net)  # NOTE: same initial weights for the native comparison
    model, ours = prepared(px.Model, net, cfg, c), LossHistory()
    t0 = time.perf_counter()
    # NOTE: drop_last keeps every batch the same shape: one executable for the whole run.
    model.fit(
        Impressions(*train),
        batch_size=c["batch"],
        epochs=c["epochs"],
        shuffle=False,
        drop_last=True,
        verbose=0,
        callbacks=[ours],
    )
    print(
        f"paddle_xla: {len(ours.losses)} steps in {time.perf_counter() - t0:.1f} s, "
        f"loss {ours.losses[0]:.4f} -> {ours.losses[-1]:.4f}"
    )

    theirs = LossHistory()
    prepared(paddle.Model, native_net, cfg, c).fit(
        Impressions(*train),
        batch_size=c["batch"],
        shuffle=False,
        drop_last=True,
        verbose=0,
        callbacks=[theirs],
        num_iters=c["compare"],
    )
    rel = max(abs(a - b) / abs(b) for a, b in zip(ours.losses, theirs.losses))
    print(
        f"paddle_xla vs native paddle.Model, first {len(theirs.losses)} steps: max relative loss difference {rel:.2e}"
    )

    auc = model.evaluate(Impressions(*test), batch_size=c["batch"], verbose=0)["auc"]
    best = oracle_auc(test_prob, test[2])
    print(f"test AUC {auc:.4f} (oracle with the true click probabilities: {best:.4f})")
    return {"losses": ours.losses, "native_losses": theirs.losses, "max_rel_diff": rel, "auc": auc, "oracle_auc": best}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="the small CI configuration")
    main(tiny=p.parse_args().tiny)
