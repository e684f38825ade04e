"""The ring attention of Strategy(sequence=N) on attention written in the ways Paddle code writes it: keys
transposed by an op or by transpose_y, a padding mask that hides whole key blocks from some rows (-inf, so
a device's running softmax starts from nothing) added, or applied with paddle.where or masked_fill (a DAG
through full_like(scores) in a static program), a finfo.min floor, tanh soft-capping, and a model that
also reads its attention weights or scaled scores elsewhere (left as captured: the ring would drop that
reader). Each trains as one device does (16 virtual CPU devices)."""

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
import pytest
from paddle.static import InputSpec

import paddle_xla as px

B, S, E, H = 4, 16, 16, 2


class Attention(nn.Layer):
    def __init__(self, transpose_op: bool = False, returns_weights: bool = False, style: str = "additive"):
        super().__init__()
        self.qkv, self.out = nn.Linear(E, 3 * E), nn.Linear(E, E)
        self.transpose_op, self.returns_weights, self.style = transpose_op, returns_weights, style
        if style == "shared":
            self.shared_k = self.create_parameter([1, 1, S, E // H])
            self.shared_v = self.create_parameter([1, 1, S, E // H])

    def forward(self, x, mask):
        q, k, v = (t.reshape([B, S, H, E // H]).transpose([0, 2, 1, 3]) for t in self.qkv(x).split(3, axis=-1))
        if self.style == "folded":  # NOTE: heads folded into the batch: [B * H, S, D]
            q = q.reshape([B * H, S, E // H])
            k = k.reshape([B * H, S, E // H])
            v = v.reshape([B * H, S, E // H])
            mask = mask.expand([B, H, S, S]).reshape([B * H, S, S])
        if self.style == "shared":  # NOTE: one key/value head of one row, repeated to every row and head
            k = self.shared_k.unsqueeze(2).expand([B, 1, H, S, E // H]).reshape([B, H, S, E // H])
            v = self.shared_v.unsqueeze(2).expand([B, 1, H, S, E // H]).reshape([B, H, S, E // H])
        if self.transpose_op:
            scores = paddle.matmul(q, k.transpose([0, 1, 3, 2]))
        else:
            scores = paddle.matmul(q, k, transpose_y=True)
        if self.style == "built":  # NOTE: the mask made from 0/1 in the program, added first
            weights = F.softmax((1.0 - (mask < -1).astype("float32")) * -1e4 * -1.0 - 1e4 + scores, axis=-1)
        elif self.style == "where":  # NOTE: masked as paddle.where writes it
            weights = F.softmax(paddle.where(mask < -1, paddle.to_tensor(float("-inf")), scores * 0.25), axis=-1)
        elif self.style == "masked_fill":
            weights = F.softmax((scores * 0.25).masked_fill(mask < -1, float("-inf")), axis=-1)
        elif self.style == "clamp":  # NOTE: the finfo.min floor some models put under the mask
            weights = F.softmax(
                paddle.maximum(scores * 0.25 + mask, paddle.to_tensor(np.finfo("float32").min)), axis=-1
            )
        elif self.style == "capped":  # NOTE: tanh soft-capping of the scores (Gemma 2's)
            weights = F.softmax(paddle.tanh(scores / 5.0) * 5.0 + mask, axis=-1)
        elif self.style == "scaled_read_twice":
            scaled = scores * 0.25
            weights = F.softmax(scaled + mask, axis=-1)
        else:
            weights = F.softmax(scores * (E // H) ** -0.5 + mask, axis=-1)
        y = paddle.matmul(weights, v).reshape([B, H, S, E // H])
        y = self.out(y.transpose([0, 2, 1, 3]).reshape([B, S, E]))
        loss = (y**2).mean()
        if self.style == "scaled_read_twice":
            loss = loss + 1e-3 * scaled.mean()
        if self.returns_weights == "sum":
            return loss, weights.sum()
        if self.returns_weights:
            return loss, weights
        return loss


def _mask():
    """Row b sees keys [0, S - 4b): rows 1-3 have their last 1-3 key blocks (of 4) hidden whole."""
    mask = np.zeros((B, 1, S, S), "float32")
    for b in range(B):
        mask[b, :, :, S - 4 * b :] = -np.inf
    return mask


def _train(strategy, **kind):
    with paddle.utils.unique_name.guard():
        paddle.seed(0)
        net = Attention(**kind)
        opt = paddle.optimizer.SGD(0.1, parameters=net.parameters())
        specs = [InputSpec([B, S, E], "float32", "x"), InputSpec([B, 1, S, S], "float32", "mask")]
        step = px.train_step(net, None, opt, specs, strategy=strategy)
    rng = np.random.default_rng(0)
    losses = [step(rng.standard_normal((B, S, E)).astype("float32"), _mask()) for _ in range(3)]
    return losses, step.weights(), step


@pytest.mark.parametrize(
    "kind,rings",
    [
        (dict(transpose_op=True), 1),
        (dict(), 1),
        (dict(style="built"), 1),
        (dict(style="folded"), 1),
        (dict(style="where"), 1),
        (dict(style="masked_fill"), 1),
        (dict(style="clamp"), 1),
        (dict(style="capped"), 1),
        (dict(style="scaled_read_twice"), 0),
        # NOTE: an epilogue value has a reader outside it; rewritten, computed as the program wrote it
        (dict(style="shared"), 1),  # NOTE: batch-1 keys broadcast by the repeat, unrepeated
        (dict(returns_weights="sum"), 0),  # NOTE: the weights have a second reader
        (dict(returns_weights=True), 0),  # NOTE: the weights are an output of the program
    ],
)
def test_ring_attention_trains_as_one_device(kind, rings):
    want_losses, want, _ = _train(None, **kind)
    losses, got, step = _train(px.Strategy(sequence=4), **kind)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, atol=1e-6, err_msg=name)
    names = [op.name for op in step._step.engine._attention_graph().block.ops]
    assert names.count("paddle_xla.ring_attention") == rings
