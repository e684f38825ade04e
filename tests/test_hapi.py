"""px.Model is paddle.Model on XLA: fit / evaluate / predict / save / load give Paddle's numbers."""

import numpy as np
import paddle
import paddle.nn as nn
from paddle.static import InputSpec

import paddle_xla as px


class Blobs(paddle.io.Dataset):
    def __init__(self, n=96, seed=0):
        rng = np.random.default_rng(seed)
        self.y = rng.integers(0, 3, n).astype("int64")
        self.x = (rng.standard_normal((n, 10)) + self.y[:, None]).astype("float32")

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __len__(self):
        return len(self.y)


class Recorder(paddle.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.train, self.eval = [], []

    def on_epoch_end(self, epoch, logs=None):
        self.train.append(dict(logs))

    def on_eval_end(self, logs=None):
        self.eval.append(dict(logs))


def _net():
    paddle.seed(3)
    return nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))


def _fit(model_cls, accumulate=1):
    net = _net()
    model = model_cls(net, [InputSpec([None, 10], "float32", "x")], [InputSpec([None], "int64", "label")])
    model.prepare(
        paddle.optimizer.Adam(1e-2, parameters=net.parameters()), nn.CrossEntropyLoss(), paddle.metric.Accuracy()
    )
    rec = Recorder()
    model.fit(
        Blobs(),
        Blobs(32, seed=1),
        epochs=3,
        batch_size=16,
        shuffle=False,
        verbose=0,
        callbacks=[rec],
        accumulate_grad_batches=accumulate,
    )
    return model, rec


def _num(v):
    return float(np.asarray(v).reshape(-1)[0])


def test_fit_matches_paddle_model_fit(tmp_path):
    ours, rec_x = _fit(px.Model)
    theirs, rec_p = _fit(paddle.Model)
    assert len(rec_x.train) == len(rec_p.train) == 3
    for a, b in zip(rec_x.train + rec_x.eval, rec_p.train + rec_p.eval):
        np.testing.assert_allclose(_num(a["loss"]), _num(b["loss"]), rtol=1e-4)
        np.testing.assert_allclose(a["acc"], b["acc"], rtol=1e-6)
    ev_x, ev_p = (
        ours.evaluate(Blobs(32, seed=2), batch_size=16, verbose=0),
        theirs.evaluate(Blobs(32, seed=2), batch_size=16, verbose=0),
    )
    np.testing.assert_allclose(_num(ev_x["loss"]), _num(ev_p["loss"]), rtol=1e-4)
    pred_x = ours.predict(Blobs(32, seed=2), batch_size=16, verbose=0, stack_outputs=True)
    pred_p = theirs.predict(Blobs(32, seed=2), batch_size=16, verbose=0, stack_outputs=True)
    np.testing.assert_allclose(pred_x[0], pred_p[0], rtol=1e-4, atol=1e-5)

    ours.save(str(tmp_path / "m"))
    fresh = px.Model(_net(), [InputSpec([None, 10], "float32", "x")], [InputSpec([None], "int64", "label")])
    fresh.prepare(paddle.optimizer.Adam(1e-2, parameters=fresh.network.parameters()), nn.CrossEntropyLoss())
    fresh.load(str(tmp_path / "m"))
    np.testing.assert_allclose(
        fresh.predict(Blobs(32, seed=2), batch_size=16, verbose=0, stack_outputs=True)[0], pred_x[0], rtol=1e-6
    )


def test_fit_with_gradient_accumulation_matches_paddle():
    # NOTE: fit(accumulate_grad_batches=3) calls train_batch(update=False) twice, then update=True.
    ours, rec_x = _fit(px.Model, accumulate=3)
    theirs, rec_p = _fit(paddle.Model, accumulate=3)
    for a, b in zip(rec_x.train + rec_x.eval, rec_p.train + rec_p.eval):
        np.testing.assert_allclose(_num(a["loss"]), _num(b["loss"]), rtol=1e-4)
        np.testing.assert_allclose(a["acc"], b["acc"], rtol=1e-6)
    ours._adapter.train_step().sync_to(ours.network)
    for (k, a), b in zip(ours.network.state_dict().items(), theirs.network.state_dict().values()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6, err_msg=k)


def _fit_loose_specs(model_cls, inputs, labels):
    """A script as Paddle users write it: labels of shape [batch] under a [None, 1] spec."""
    net = _net()
    model = model_cls(net, inputs, labels)
    model.prepare(
        paddle.optimizer.SGD(0.1, parameters=net.parameters()), nn.CrossEntropyLoss(), paddle.metric.Accuracy()
    )
    rec = Recorder()
    model.fit(Blobs(), Blobs(32, seed=1), epochs=2, batch_size=16, shuffle=False, verbose=0, callbacks=[rec])
    return rec


def test_specs_the_batches_do_not_fit_train_as_in_paddle():
    cases = [
        ([InputSpec([None, 10], "float32", "x")], [InputSpec([None, 1], "int64", "label")]),
        (None, None),
    ]  # NOTE: paddle.Model in dynamic mode needs no specs
    for inputs, labels in cases:
        ours, theirs = _fit_loose_specs(px.Model, inputs, labels), _fit_loose_specs(paddle.Model, inputs, labels)
        assert len(ours.train) == len(theirs.train) == 2
        for a, b in zip(ours.train + ours.eval, theirs.train + theirs.eval):
            np.testing.assert_allclose(_num(a["loss"]), _num(b["loss"]), rtol=1e-4)
            np.testing.assert_allclose(a["acc"], b["acc"], rtol=1e-6)
