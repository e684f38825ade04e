"""`make demo`: capture a BERT-style encoder, check coverage, compile, compare with Paddle, time both."""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table


def run(batch: int = 8, seq: int = 128) -> None:
    import paddle
    from paddle.static import InputSpec

    import paddle_xla as px
    from paddle_xla.models.bert import BertConfig, BertModel

    console = Console()
    paddle.seed(0)
    cfg = BertConfig.small()
    console.rule(f"inference: BERT-{cfg.name}, batch {batch} x seq {seq}, native Paddle vs paddle_xla")
    net = BertModel(cfg)
    net.eval()
    specs = [InputSpec([None, None], "int64", "input_ids"), InputSpec([None, None], "int64", "token_type_ids")]
    with console.status("capturing with paddle.jit.to_static and checking op coverage"):
        report = px.check(net, specs)
    console.print(
        f"[bold]coverage[/]: {sum(report.counts.values())} ops, {len(report.counts)} op types, "
        f"{'all supported' if report.ok else report.unsupported}"
    )
    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg.vocab_size, (batch, seq)).astype("int64")
    types = np.zeros_like(ids)
    with console.status("compiling with XLA"):
        model = px.compile(net, specs)
        t0 = time.perf_counter()
        got = model(ids, types)
        compile_s = time.perf_counter() - t0
    want = [t.numpy() for t in net(paddle.to_tensor(ids), paddle.to_tensor(types))]
    err = max(float(np.max(np.abs(g - w)) / (np.max(np.abs(w)) + 1e-12)) for g, w in zip(got, want))
    console.print(f"first call (compile + run) {compile_s:.1f} s; max relative difference to Paddle {err:.2e}")
    with console.status("timing paddle_xla and Paddle's configurations, each after the same warm-up call"):
        timings = _inference_timings(cfg.name, batch, seq)
    _print_timings(console, timings, cfg.name, batch, seq)
    from .validate import run as validate

    console.rule("training: BERT-tiny pretraining, native Paddle vs paddle_xla, same weights and batches")
    validate("tiny", steps=30, batch=8, seq=64, out_dir="validate_out", console=console)
    console.print("report: validate_out/report.json, plot: validate_out/report.png")


ROUNDS = 7  # NOTE: timed calls per configuration, interleaved, after one untimed call each


def _inference_timings(config: str, batch: int, seq: int) -> dict[str, float]:
    """Median seconds per call of each configuration, in this process and with the same warm-up:
    Paddle eager and Paddle Inference (oneDNN, threads = cores: Paddle's fastest on a CPU), and
    paddle_xla in fp32 and bf16. The configurations take turns, one call each per round, so that a
    machine whose speed drifts (other work on it) slows them all alike."""
    from . import bench as b

    s = b.BenchSettings(config=config, batch=batch, seq=seq)
    bf16 = b.BenchSettings(config=config, batch=batch, seq=seq, strategy={"precision": "bf16"})
    timed = b.time_interleaved(
        {
            "Paddle eager": lambda: _paddle_eager_call(s),
            "Paddle Inference (oneDNN)": lambda: b.paddle_inference_call(s),
            "paddle_xla fp32": lambda: b.xla_inference_call(s),
            "paddle_xla bf16": lambda: b.xla_inference_call(bf16),
        },
        ROUNDS,
    )
    return {k: r["median_s"] for k, r in timed.items() if "median_s" in r}


def _paddle_eager_call(s):
    import paddle

    from . import bench as b

    cfg, net = b._bert(s, head=False)
    net.eval()
    ids, types = (paddle.to_tensor(x) for x in b._encoder_inputs(cfg, s))

    def call():
        with paddle.no_grad():
            return net(ids, types)[0].numpy()

    return call


def _print_timings(console, timings: dict[str, float], name: str, batch: int, seq: int) -> None:
    best_name = min((k for k in timings if k.startswith("Paddle")), key=lambda k: timings[k])
    best = timings[best_name]
    table = Table(
        title=f"BERT-{name} inference, batch {batch}, seq {seq}: median of {ROUNDS} calls, the "
        f"configurations taking turns in this process after one untimed call each"
    )
    for col in ("configuration", "latency (ms)", f"vs Paddle's best ({best_name}, fp32)"):
        table.add_column(col)
    for k, t in timings.items():
        table.add_row(k, f"{t * 1e3:.1f}", f"{best / t:.2f}x")
    console.print(table)
