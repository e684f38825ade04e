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
    net = BertModel(cfg)
    net.eval()
    specs = [InputSpec([None, None], "int64", "input_ids"), InputSpec([None, None], "int64", "token_type_ids")]
    with console.status("capturing with paddle.jit.to_static and checking op coverage"):
        report = px.check(net, specs)
    console.print(f"[bold]coverage[/]: {sum(report.counts.values())} ops, {len(report.counts)} op types, "
                  f"{'all supported' if report.ok else report.unsupported}")
    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg.vocab_size, (batch, seq)).astype("int64")
    types = np.zeros_like(ids)
    with console.status("compiling with XLA"):
        model = px.compile(net, specs)
        t0 = time.perf_counter(); got = model(ids, types); compile_s = time.perf_counter() - t0
    want = [t.numpy() for t in net(paddle.to_tensor(ids), paddle.to_tensor(types))]
    err = max(float(np.max(np.abs(g - w)) / (np.max(np.abs(w)) + 1e-12)) for g, w in zip(got, want))
    xla_s = _time(lambda: model.compiled.run(ids, types)[0].block_until_ready())
    pd_s = _time(lambda: net(paddle.to_tensor(ids), paddle.to_tensor(types))[0].numpy())
    table = Table(title=f"BERT-{cfg.name} inference, batch {batch}, seq {seq}")
    for col in ("", "latency (ms)", "speed-up"):
        table.add_column(col)
    table.add_row("Paddle eager", f"{pd_s * 1e3:.1f}", "1.00x")
    table.add_row("paddle_xla", f"{xla_s * 1e3:.1f}", f"{pd_s / xla_s:.2f}x")
    console.print(table)
    console.print(f"first call (compile + run) {compile_s:.1f} s; max relative difference to Paddle {err:.2e}")
    from .validate import run as validate
    console.rule("training: BERT-tiny pretraining, native Paddle vs paddle_xla, same weights and batches")
    validate("tiny", steps=30, batch=8, seq=64, out_dir="validate_out", console=console)
    console.print("report: validate_out/report.json, plot: validate_out/report.png")


def _time(fn, repeat: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter(); fn(); times.append(time.perf_counter() - t0)
    return float(np.median(times))
