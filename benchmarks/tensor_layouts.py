"""Tensor-parallel and sharded layouts on 16 virtual CPU devices, measured beside the planner's
predictions: per layout, the step time (median of timed steps after a compiling one), XLA's
memory_analysis of the compiled step (arguments + temporaries) and the bytes and step time the
planner predicts for it on this machine's measured profile.

Step times of virtual devices sharing two cores say little about real devices; bytes carry over.

    python benchmarks/parallel.py --tensor   ->  benchmarks/results/parallel_tensor.json
"""

from __future__ import annotations

import contextlib
import io
import statistics
import time

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.static import InputSpec

import paddle_xla as px
from paddle_xla.api.planning import _stage_bytes
from paddle_xla.models.bert import BertConfig, BertForSequenceClassification, BertModel
from paddle_xla.models.gpt import GPT, GPTConfig
from paddle_xla.parallel.engine import memory_analysis
from paddle_xla.parallel.tensor_plan import make_plan
from paddle_xla.planner.costs import model_costs
from paddle_xla.planner.profiles import measured_cpu
from paddle_xla.planner.search import describe, planned, predict

BATCH, SEQ = 32, 64
LAYOUTS = [
    planned(replicas=16),
    planned(replicas=8, tensor=2),
    planned(replicas=4, tensor=4),
    planned(replicas=16, sharding=3),
    planned(replicas=4, tensor=4, sharding=3),
    planned(replicas=4, sharding=2, micro_batches=2),
    planned(replicas=4, tensor=4, precision="bf16"),
    planned(replicas=2, stages=4, micro_batches=8, schedule="1f1b"),
]


class LM(nn.Layer):
    def __init__(self, cfg):
        super().__init__()
        self.gpt = GPT(cfg)

    def forward(self, ids, labels):
        logits = self.gpt(ids)
        return F.cross_entropy(logits.reshape([-1, logits.shape[-1]]), labels.reshape([-1, 1])).mean()


def _model(kind):
    paddle.seed(0)
    if kind == "bert":
        cfg = BertConfig(
            name="bench",
            vocab_size=1000,
            hidden_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            intermediate_size=512,
            max_position_embeddings=128,
        ).without_dropout()
        net = BertForSequenceClassification(cfg, num_classes=3)
        return net, BertModel.input_spec(SEQ), [InputSpec([None], "int64", "label")], nn.CrossEntropyLoss()
    net = LM(GPTConfig.named("mini", n_ctx=SEQ))
    return net, [InputSpec([None, SEQ], "int64", "ids"), InputSpec([None, SEQ], "int64", "labels")], [], None


def _batch(kind, seed):
    rng = np.random.default_rng(seed)
    if kind == "bert":
        return [rng.integers(0, 1000, (BATCH, SEQ)), rng.integers(0, 2, (BATCH, SEQ)), rng.integers(0, 3, (BATCH,))]
    ids = rng.integers(0, 4096, (BATCH, SEQ))
    return [ids, np.roll(ids, -1, axis=1)]


def run(kind: str, layout: px.Strategy, profile, repeats: int = 3) -> dict:
    net, specs, labels, loss = _model(kind)
    opt = paddle.optimizer.AdamW(1e-4, parameters=net.parameters(), grad_clip=nn.ClipGradByGlobalNorm(1.0))
    with contextlib.redirect_stdout(io.StringIO()):
        st = px.Strategy(**{**layout.to_dict(), "loss_reduction": "mean"})
        step = px.train_step(net, loss, opt, specs, labels, strategy=st)
    start = time.perf_counter()
    step(*_batch(kind, 0))
    first = time.perf_counter() - start
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        step(*_batch(kind, i + 1))
        times.append(time.perf_counter() - start)
    feeds = {k: v[None] for k, v in step.feeds(_batch(kind, 0), {}).items()}
    s = step.state
    mem = memory_analysis(step._step.engine, s.params, s.buffers, s.opt_state, feeds)
    costs = model_costs(step.graph, step.config)
    keys = step.captured.state_keys
    tplan = make_plan(step.graph, keys, None, layout.tensor) if layout.tensor > 1 else None
    pred = predict(costs, layout, profile, BATCH, tplan, _stage_bytes(step.graph, keys, costs))
    measured = mem["argument_bytes"] + mem["temp_bytes"]
    return {
        "model": kind,
        "layout": describe(layout),
        "first_call_s": round(first, 2),
        "step_s": round(statistics.median(times), 4),
        "memory_analysis": mem,
        "measured_bytes": measured,
        "predicted_bytes": round(pred.total_bytes),
        "predicted_bytes_error": round(pred.total_bytes / measured - 1, 3),
        "predicted_breakdown": {k: round(v) for k, v in pred.bytes.items()},
        "predicted_step_s": round(pred.step_seconds, 4),
        "bytes_per_device_held": step._step.engine.param_bytes_per_device(),
    }


def main(out_path: str) -> dict:
    profile = measured_cpu(16)
    rows = []
    for kind in ("bert", "gpt"):
        for layout in LAYOUTS:
            r = run(kind, layout, profile)
            rows.append(r)
            print(
                f"{kind:4s} {r['layout']:34s} step {r['step_s']:.3f} s (predicted {r['predicted_step_s']:.3f}); "
                f"bytes {r['measured_bytes']} (predicted {r['predicted_bytes']}, {r['predicted_bytes_error']:+.1%})",
                flush=True,
            )
    return {
        "batch": BATCH,
        "seq": SEQ,
        "profile": profile.__dict__,
        "layouts": rows,
        "command": "python benchmarks/parallel.py --tensor",
    }
