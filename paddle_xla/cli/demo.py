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
    console.print(f"first call (compile + run) {compile_s:.1f} s; max relative difference to Paddle {err:.2e}")
    with console.status("timing paddle_xla and Paddle's configurations, each after the same warm-up call"):
        timings = _inference_timings(cfg.name, batch, seq)
    _print_timings(console, timings, cfg.name, batch, seq)
    from .validate import run as validate
    console.rule("training: BERT-tiny pretraining, native Paddle vs paddle_xla, same weights and batches")
    validate("tiny", steps=30, batch=8, seq=64, out_dir="validate_out", console=console)
    console.print("report: validate_out/report.json, plot: validate_out/report.png")


REPEATS = 7   # NOTE: timed calls per configuration, after one untimed one; the median is reported


def _inference_timings(config: str, batch: int, seq: int) -> dict[str, float]:
    """Median seconds per call of each configuration, in this process, the same warm-up for each:
    Paddle eager and Paddle Inference (oneDNN, threads = cores: Paddle's fastest on a CPU), and
    paddle_xla in fp32 and bf16."""
    from . import bench as b
    s = b.BenchSettings(config=config, batch=batch, seq=seq, repeats=REPEATS)
    out = {"Paddle eager": _paddle_eager(s)["median_s"],
           "Paddle Inference (oneDNN)": b.paddle_inference(s)["median_s"],
           "paddle_xla fp32": b.xla_inference(s)["median_s"]}
    bf16 = b.BenchSettings(config=config, batch=batch, seq=seq, repeats=REPEATS, strategy={"precision": "bf16"})
    out["paddle_xla bf16"] = b.xla_inference(bf16)["median_s"]
    return out


def _paddle_eager(s) -> dict:
    import paddle
    from . import bench as b
    cfg, net = b._bert(s, head=False)
    net.eval()
    ids, types = (paddle.to_tensor(x) for x in b._encoder_inputs(cfg, s))
    with paddle.no_grad():
        return b.time_calls(lambda: net(ids, types)[0].numpy(), s.repeats)


def _print_timings(console, timings: dict[str, float], name: str, batch: int, seq: int) -> None:
    best_name = min((k for k in timings if k.startswith("Paddle")), key=timings.get)
    best = timings[best_name]
    table = Table(title=f"BERT-{name} inference, batch {batch}, seq {seq}: median of {REPEATS} calls after one "
                        f"untimed, each configuration in this process")
    for col in ("configuration", "latency (ms)", f"vs Paddle's best ({best_name}, fp32)"):
        table.add_column(col)
    for k, t in timings.items():
        table.add_row(k, f"{t * 1e3:.1f}", f"{best / t:.2f}x")
    console.print(table)
