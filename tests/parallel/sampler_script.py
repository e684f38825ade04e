"""Run by test_launchers in each of 2 processes, and by the test itself as one process: a Paddle script
whose data comes through paddle.io.DistributedBatchSampler (by hand, and inside paddle.Model.fit), each
rank loading its own share of every global batch. argv: output path, per-rank batch size. Process 0
writes both loss curves."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import numpy as np
import paddle

import paddle_xla as px
from parallel.helpers import LABEL, loss_fn, setup


class Data(paddle.io.Dataset):
    def __init__(self, n=48):
        rng = np.random.default_rng(3)
        self.x = rng.standard_normal((n, 16)).astype("float32")
        self.y = rng.integers(0, 4, (n,))

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __len__(self):
        return len(self.x)


class Losses(paddle.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_batch_end(self, step, logs=None):
        self.seen.append(float(np.asarray(logs["loss"]).reshape(-1)[0]))


def by_hand(batch: int, strategy) -> list[float]:
    net, opt, specs = setup("mlp")
    step = px.train_step(net, loss_fn(), opt, specs, LABEL, strategy=strategy)
    sampler = paddle.io.DistributedBatchSampler(Data(), batch_size=batch, shuffle=True)
    loader = paddle.io.DataLoader(Data(), batch_sampler=sampler)
    losses = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        losses += [step(x, y) for x, y in loader]
    return losses


def with_fit(batch: int, strategy) -> list[float]:
    net, opt, specs = setup("mlp")
    model = px.Model(net, specs, LABEL, strategy=strategy)
    model.prepare(opt, loss_fn())
    seen = Losses()
    model.fit(Data(), batch_size=batch, epochs=2, shuffle=True, verbose=0, callbacks=[seen])
    return seen.seen


def main(out: str, batch: int, strategy=None) -> dict:
    curves = {"by_hand": by_hand(batch, strategy), "fit": with_fit(batch, strategy)}
    if jax.process_index() == 0:
        with open(out, "w") as f:
            json.dump(curves, f)
    return curves


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
