"""Parallel layouts on 16 virtual CPU devices (an IPU-POD16-shaped mesh on any machine).

Absolute speed on virtual devices that share a few cores means little, so this reports what carries
over to real devices, per layout (replicas x stages x micro-batches):
  - bytes per device: weights, optimizer state (packed stage widths), and XLA's compiled memory
    analysis (arguments, temporaries = peak activations and workspace);
  - the pipeline bubble fraction (S-1)/(M+S-1);
  - communication per step and device: the gradient all-reduce (ring: 2(R-1)/R of a stage's gradient
    bytes), the activations and their gradients crossing stage boundaries (useful bytes, and the padded
    bytes the SPMD program actually sends every tick), and ZeRO-1's state all-gather;
  - step time relative to the 1-device run.
It also times a host-driven MPMD pipeline (one jitted program per stage) against the SPMD one: the
measurement behind the choice written down in paddle_xla/parallel/pipeline.py.

    python benchmarks/parallel.py [--quick] [--bert-base]   ->  benchmarks/results/parallel.json
    python benchmarks/parallel.py --tensor                  ->  benchmarks/results/parallel_tensor.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=16")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import numpy as np
import paddle
import paddle.nn as nn

import paddle_xla as px
from benchmarks.common import machine_info
from paddle_xla.models.bert import BertConfig, BertForSequenceClassification, BertModel
from paddle_xla.parallel.engine import memory_analysis

LAYOUTS = [  # (replicas, stages, micro_batches, recompute, shard_optimizer_state[, schedule])
    (1, 1, 1, None, False),
    (1, 1, 1, "layer", False),
    (16, 1, 1, None, False),
    (16, 1, 1, None, True),
    (1, 4, 8, None, False),
    (1, 4, 8, "stage", False),
    (4, 4, 4, None, False),
    (4, 4, 4, "stage", True),
    (2, 8, 8, "stage", False),
]
# NOTE: GPipe against 1F1B at the same micro_batches (batch 32: micro-batches of 4 or 2 samples).
SCHEDULES = [
    (1, 4, 8, None, False, "gpipe"),
    (1, 4, 8, "stage", False, "gpipe"),
    (1, 4, 16, "stage", False, "gpipe"),
    (1, 4, 8, None, False, "1f1b"),
    (1, 4, 16, None, False, "1f1b"),
]


def _fields(layout):
    r, s, m, rc, zero, *rest = layout
    return r, s, m, rc, zero, (rest[0] if rest else "gpipe")


def model(cfg: BertConfig):
    paddle.seed(0)
    return BertForSequenceClassification(cfg.without_dropout(), num_classes=3)


def make_step(cfg, layout, verbose=False):
    r, s, m, rc, zero, schedule = _fields(layout)
    net = model(cfg)
    opt = paddle.optimizer.AdamW(1e-4, parameters=net.parameters(), grad_clip=nn.ClipGradByGlobalNorm(1.0))
    st = px.Strategy(
        replicas=r,
        stages=s,
        micro_batches=m,
        recompute=rc,
        shard_optimizer_state=zero,
        loss_reduction="mean",
        schedule=schedule if s > 1 else "gpipe",
    )
    if verbose:
        return px.train_step(net, nn.CrossEntropyLoss(), opt, BertModel.input_spec(), [_label()], strategy=st)
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # NOTE: the printed plans go into the JSON instead
        return px.train_step(net, nn.CrossEntropyLoss(), opt, BertModel.input_spec(), [_label()], strategy=st)


def _label():
    return paddle.static.InputSpec([None], "int64", "label")


def batch(cfg, n, seq, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, cfg.vocab_size, (n, seq)), rng.integers(0, 2, (n, seq)), rng.integers(0, 3, (n,))]


def communication(engine, layout, feeds) -> dict:
    r, s, m, _, zero, schedule = _fields(layout)
    nb = lambda w: sum(n * np.dtype(dt).itemsize for dt, n in w.items())  # noqa: E731
    grads = engine.param_bytes_per_device()["params"]
    out = {"grad_allreduce_bytes": int(2 * (r - 1) / r * grads) if r > 1 else 0}
    info = engine.stage_info.get(next(iter(engine.stage_info)), None) if engine.stage_info else None
    if info is not None:
        # NOTE: forward activations + their gradients backward, for every micro-batch of the replica.
        out["stage_send_useful_bytes"] = int(2 * m * max(info.send_bytes))
        # GPipe: M+S-1 ticks forward and as many backward; 1F1B: M+2S-2 ticks, each sending both ways.
        ticks = 2 * (m + s - 1) if schedule == "gpipe" else 2 * (m + 2 * s - 2)
        out["stage_send_padded_bytes"] = int(ticks * nb(info.box))
    if zero:
        out["zero_allgather_bytes"] = int((r - 1) / r * nb(engine.widths["opt"]))
    return out


def run_layout(cfg, layout, n, seq, repeats):
    step = make_step(cfg, layout)
    engine = step._step.engine
    x = batch(cfg, n, seq)
    feeds = step.feeds(x, {})
    start = time.perf_counter()
    loss = step(*x)
    compile_s = time.perf_counter() - start
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        step(*batch(cfg, n, seq, seed=i + 1))
        times.append(time.perf_counter() - start)
    mem = memory_analysis(
        engine, step.state.params, step.state.buffers, step.state.opt_state, {k: v[None] for k, v in feeds.items()}
    )
    placement = engine.placement
    keys = ("replicas", "stages", "micro_batches", "recompute", "shard_optimizer_state", "schedule")
    return {
        "layout": dict(zip(keys, _fields(layout))),
        "first_loss": loss,
        "first_call_s": round(compile_s, 2),
        "step_s": statistics.median(times),
        "bytes_per_device": engine.param_bytes_per_device(),
        "memory_analysis": mem,
        "bubble_fraction": engine.bubble_fraction(),
        "communication_per_step": communication(engine, layout, feeds),
        "plan": getattr(placement, "plan", ""),
    }


# ---- the MPMD probe: one jitted program per stage, scheduled from the host ---------------------------
def mpmd_step_time(cfg, stages, micro, n, seq, repeats):
    """GPipe driven from the host: per micro-batch and stage a jitted forward (returning its vjp) on
    that stage's device, then the backward in reverse, then each stage's update. Same stages as SPMD."""
    from paddle_xla.parallel.program import run
    from paddle_xla.train import optim

    step = make_step(cfg, (1, stages, micro, None, False))
    engine, graph = step._step.engine, step.graph
    x = batch(cfg, n, seq)
    feeds = step.feeds(x, {})
    engine.compiled({k: v[None] for k, v in feeds.items()})  # builds the stage programs
    info = next(iter(engine.stage_info.values()))
    devices = list(engine.mesh.devices.reshape(-1))[:stages]
    weights = step.weights()
    own = engine.own
    params = [jax.device_put({k: weights[k] for k in own.trainable[s]}, devices[s]) for s in range(stages)]
    buffers = [jax.device_put({k: weights[k] for k in own.buffers[s]}, devices[s]) for s in range(stages)]
    opt_states = [
        jax.device_put(optim.init_state(engine.configs[s], {**{k: weights[k] for k in own.trainable[s]}}), devices[s])
        for s in range(stages)
    ]

    def fwd(s):
        def f(p, b, fm, received):
            def g(p, received):
                outs, _ = run(graph, info.subs[s], {**p, **b}, fm, received, jax.random.key(0))
                if s == stages - 1:
                    return jax.numpy.sum(outs[0].astype("float32")) / micro
                return outs

            return jax.vjp(g, p, received)

        return jax.jit(f)

    fwds = [fwd(s) for s in range(stages)]
    bwd = jax.jit(lambda vjp_fn, ct: vjp_fn(ct))
    upd = [jax.jit(lambda p, g, st, s=s: optim.apply(engine.configs[s], p, g, st, 1e-4)) for s in range(stages)]
    b = n // micro

    def one_step():
        mfeeds = [{k: v[i * b : (i + 1) * b] for k, v in feeds.items()} for i in range(micro)]
        vjps, grads = [[None] * stages for _ in range(micro)], [None] * stages
        for i in range(micro):
            received = ()
            for s in range(stages):
                fm = jax.device_put(mfeeds[i], devices[s])
                out, vjps[i][s] = fwds[s](params[s], buffers[s], fm, jax.device_put(received, devices[s]))
                received = out
        for i in range(micro):
            ct = jax.device_put(np.float32(1.0), devices[-1])
            for s in reversed(range(stages)):
                gp, ct = bwd(vjps[i][s], ct)
                grads[s] = gp if grads[s] is None else jax.tree.map(jax.numpy.add, grads[s], gp)
                if s:
                    ct = jax.device_put(ct, devices[s - 1])
        for s in range(stages):
            params[s], opt_states[s] = upd[s](params[s], grads[s], opt_states[s])
        jax.block_until_ready(params)

    one_step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        one_step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bert_base_pod16() -> dict:
    """What a POD16-shaped layout of BERT-Base (4 replicas x 4 stages, ZeRO-1, AdamW) keeps per device."""
    cfg = BertConfig.base()
    out = {}
    for layout in [(1, 1, 1, None, False), (4, 4, 16, "stage", True), (16, 1, 1, None, True)]:
        step = make_step(cfg, layout)
        engine = step._step.engine
        key = "x".join(map(str, layout[:3])) + (f"_{layout[3]}" if layout[3] else "") + ("_zero" if layout[4] else "")
        out[key] = {"bytes_per_device": engine.param_bytes_per_device(), "plan": getattr(engine.placement, "plan", "")}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--bert-base", action="store_true", help="also size a POD16 layout of BERT-Base")
    ap.add_argument(
        "--schedules",
        action="store_true",
        help="only GPipe against 1F1B (4 stages, M = 8 and 16), into results/parallel_schedules.json",
    )
    ap.add_argument(
        "--tensor",
        action="store_true",
        help="only tensor-parallel and sharded layouts beside the planner's predictions, into "
        "results/parallel_tensor.json (benchmarks/tensor_layouts.py)",
    )
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "parallel.json"))
    args = ap.parse_args()
    if args.tensor:
        from benchmarks import tensor_layouts

        out = (
            args.out
            if args.out != ap.get_default("out")
            else os.path.join(os.path.dirname(__file__), "results", "parallel_tensor.json")
        )
        _write(tensor_layouts.main(out), out)
        return
    cfg = BertConfig(
        name="bench",
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=512,
        max_position_embeddings=128,
    )
    n, seq, repeats = (32, 32, 2) if args.quick else (32, 64, 4)
    layouts = SCHEDULES if args.schedules else LAYOUTS[:5] if args.quick else LAYOUTS
    if args.schedules and args.out == ap.get_default("out"):
        args.out = os.path.join(os.path.dirname(__file__), "results", "parallel_schedules.json")
    results = {"machine": machine_info(), "model": cfg.__dict__, "batch": n, "seq": seq, "layouts": []}
    for layout in layouts:
        r = run_layout(cfg, layout, n, seq, repeats)
        results["layouts"].append(r)
        print(json.dumps({k: r[k] for k in ("layout", "step_s", "bubble_fraction", "bytes_per_device")}), flush=True)
    base = results["layouts"][0]["step_s"]
    for r in results["layouts"]:
        r["step_time_vs_gpipe_m8" if args.schedules else "step_time_vs_1_device"] = round(r["step_s"] / base, 3)
    if args.schedules:
        _write(results, args.out)
        return
    spmd = next(r["step_s"] for r in results["layouts"] if r["layout"]["stages"] == 4 and r["layout"]["replicas"] == 1)
    results["mpmd_vs_spmd"] = {
        "stages": 4,
        "micro_batches": 8,
        "spmd_step_s": spmd,
        "mpmd_step_s": mpmd_step_time(cfg, 4, 8, n, seq, repeats),
    }
    print(json.dumps(results["mpmd_vs_spmd"]), flush=True)
    if args.bert_base:
        results["bert_base_pod16"] = bert_base_pod16()
    _write(results, args.out)


def _write(results: dict, path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    from paddle_xla import x64

    with x64.scope():  # NOTE: Paddle's int64 feeds for the raw JAX calls timed here, as the library's own
        main()
