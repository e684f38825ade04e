"""`paddle-xla validate bert-base`: train BERT natively and through paddle_xla from the same weights
on the same batches, and report loss parity, weight parity, MLM/NSP accuracy and throughput."""

from __future__ import annotations

import copy
import json
import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass
class Report:
    config: str
    steps: int
    batch: int
    seq: int
    paddle_loss: list[float] = field(default_factory=list)
    xla_loss: list[float] = field(default_factory=list)
    max_rel_loss_diff: float = 0.0
    max_rel_weight_diff: float = 0.0
    paddle_accuracy: dict = field(default_factory=dict)
    xla_accuracy: dict = field(default_factory=dict)
    paddle_samples_per_s: float = 0.0
    xla_samples_per_s: float = 0.0
    xla_compile_s: float = 0.0
    dropout: bool = False
    max_predictions: int = 0  # 0: the MLM head scores every token
    convergence: dict = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.xla_samples_per_s / self.paddle_samples_per_s if self.paddle_samples_per_s else 0.0


def run(
    config: str = "tiny",
    steps: int = 30,
    batch: int = 8,
    seq: int = 64,
    lr: float = 1e-3,
    out_dir: str = "validate_out",
    seed: int = 0,
    console=None,
    dropout: bool = False,
    max_predictions: int = 0,
) -> Report:
    """dropout=False: the parity run (identical curves expected). dropout=True: the convergence run;
    each framework draws its own dropout masks, so the curves agree only statistically (see converge).
    max_predictions > 0: the MLM head scores only that many masked positions per sequence."""
    import paddle
    from rich.console import Console
    from rich.progress import Progress

    from ..api.training import train_step
    from ..models.bert import BertConfig, BertForPretraining
    from ..models.bert_data import (
        PretrainingData,
        check_vocab,
        corpus_sentences,
        import_validate_extra,
        train_tokenizer,
    )

    # NOTE: the plot's library is asked for now, so a missing extra is said before the runs, not after.
    import_validate_extra("matplotlib", "the validate report's plot (report.png)")
    console = console or Console()
    cfg = BertConfig.named(config)
    cfg = cfg if dropout else cfg.without_dropout()
    sentences = corpus_sentences()
    tokenizer = train_tokenizer(sentences, min(cfg.vocab_size, 8000))
    check_vocab(tokenizer, cfg.vocab_size)
    data = PretrainingData(tokenizer, sentences, seq, cfg.max_position_embeddings, seed)
    batches = [data.batch(batch) for _ in range(steps)]
    eval_batches = [data.batch(batch) for _ in range(16 if dropout else 4)]

    paddle.seed(seed)
    net = BertForPretraining(cfg)
    native = copy.deepcopy(net)
    opt_x = _optimizer(paddle, net, lr, steps)
    opt_n = _optimizer(paddle, native, lr, steps)
    step = train_step(net, None, opt_x, BertForPretraining.input_spec(seq, max_predictions))
    inputs = (lambda b: b.with_masked_positions(max_predictions)) if max_predictions else (lambda b: b.as_list())
    report = Report(config, steps, batch, seq, dropout=dropout, max_predictions=max_predictions)
    xla_times, pd_times = [], []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"BERT-{config}: paddle_xla and Paddle, {steps} steps", total=steps)
        for i, b in enumerate(batches):
            t0 = time.perf_counter()
            report.xla_loss.append(step(*inputs(b)))
            t1 = time.perf_counter()
            report.paddle_loss.append(_native_step(paddle, native, opt_n, inputs(b)))
            t2 = time.perf_counter()
            (xla_times if i else [report.__setattr__("xla_compile_s", t1 - t0)]).append(t1 - t0)
            pd_times.append(t2 - t1)
            progress.advance(task)
    step.sync_to(net)
    report.xla_samples_per_s = batch / float(np.median(xla_times)) if xla_times else 0.0
    report.paddle_samples_per_s = batch / float(np.median(pd_times[1:] or pd_times))
    pl, xl = np.array(report.paddle_loss), np.array(report.xla_loss)
    report.max_rel_loss_diff = float(np.max(np.abs(xl - pl) / np.maximum(np.abs(pl), 1e-12)))
    report.max_rel_weight_diff = _weight_diff(net, native)
    report.paddle_accuracy = _accuracy(paddle, native, eval_batches)
    report.xla_accuracy = _accuracy(paddle, net, eval_batches)
    if dropout:
        report.convergence = converge(report)
    write(report, out_dir)
    console.print(table(report))
    return report


def converge(r: Report, window: float = 0.2) -> dict:
    """Do two dropout-on runs converge alike? Compares the mean loss over the last `window` of the steps
    and the held-out MLM/NSP accuracy. The loss difference is judged against its own noise: the
    standard error of the per-step difference over the window (the runs see the same batches, so
    batch-to-batch variation cancels and dropout's noise remains)."""
    n = max(2, int(len(r.paddle_loss) * window))
    p, x = np.array(r.paddle_loss[-n:]), np.array(r.xla_loss[-n:])
    diff = x - p
    se = float(np.std(diff, ddof=1) / np.sqrt(n))
    first = float(np.mean(r.paddle_loss[:5]))
    out = {
        "window_steps": n,
        "paddle_mean_loss": float(p.mean()),
        "xla_mean_loss": float(x.mean()),
        "first_steps_mean_loss": first,
        "mean_loss_diff": float(diff.mean()),
        "standard_error": se,
        "mlm_accuracy_diff": r.xla_accuracy.get("mlm", 0) - r.paddle_accuracy.get("mlm", 0),
        "nsp_accuracy_diff": r.xla_accuracy.get("nsp", 0) - r.paddle_accuracy.get("nsp", 0),
    }
    # NOTE: alike = the loss gap within 3 standard errors (or 2 % of the loss), both runs learned
    # (the final window at least 3 % below the first 5 steps), and held-out MLM accuracy within 3 points.
    out["ok"] = bool(
        abs(out["mean_loss_diff"]) <= max(3 * se, 0.02 * out["paddle_mean_loss"])
        and max(out["paddle_mean_loss"], out["xla_mean_loss"]) < 0.97 * first
        and abs(out["mlm_accuracy_diff"]) <= 0.03
    )
    return out


def _optimizer(paddle, net, lr, steps):
    sched = paddle.optimizer.lr.LinearWarmup(
        paddle.optimizer.lr.PolynomialDecay(lr, steps, 0.0), max(1, steps // 10), 0.0, lr
    )
    return paddle.optimizer.AdamW(
        sched, parameters=net.parameters(), weight_decay=0.01, grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0)
    )


def _native_step(paddle, net, opt, inputs) -> float:
    loss = net(*[paddle.to_tensor(x) for x in inputs])
    loss.backward()
    opt.step()
    opt.clear_grad()
    opt._learning_rate.step()
    return float(loss)


def _weight_diff(a, b) -> float:
    """Max over tensors of max|a - b| / max(max|b|, 0.01).

    NOTE: the 0.01 floor (half the init std): attention key biases have an analytically zero gradient
    (softmax ignores a per-query constant), so both frameworks move them by ~1e-7 of fp32 round-off
    noise; relative to their own ~1e-7 size that would read as 100 %."""
    worst = 0.0
    sb = b.state_dict()
    for k, t in a.state_dict().items():
        x, y = t.numpy(), sb[k].numpy()
        worst = max(worst, float(np.max(np.abs(x - y)) / max(float(np.max(np.abs(y))), 0.01)))
    return worst


def _accuracy(paddle, net, batches) -> dict:
    net.eval()
    mlm_hit = mlm_n = nsp_hit = nsp_n = 0
    with paddle.no_grad():
        for b in batches:
            mlm, nsp = net.logits(paddle.to_tensor(b.input_ids), paddle.to_tensor(b.token_type_ids))
            pred, mask = mlm.numpy().argmax(-1), b.mlm_labels != -100
            mlm_hit += int((pred[mask] == b.mlm_labels[mask]).sum())
            mlm_n += int(mask.sum())
            nsp_hit += int((nsp.numpy().argmax(-1) == b.nsp_labels).sum())
            nsp_n += len(b.nsp_labels)
    net.train()
    return {"mlm": mlm_hit / max(mlm_n, 1), "nsp": nsp_hit / max(nsp_n, 1)}


def table(r: Report):
    from rich.table import Table

    t = Table(
        title=f"BERT-{r.config} validation: {r.steps} steps, batch {r.batch}, seq {r.seq}, "
        f"dropout {'on' if r.dropout else 'off'}"
    )
    for col in ("", "Paddle (eager)", "paddle_xla"):
        t.add_column(col)
    if r.dropout:
        c = r.convergence
        t.add_row(
            f"mean loss, last {c['window_steps']} steps",
            f"{c['paddle_mean_loss']:.4f}",
            f"{c['xla_mean_loss']:.4f} (diff {c['mean_loss_diff']:+.4f} +- {c['standard_error']:.4f})",
        )
        t.add_row("converge alike", "", "yes" if c["ok"] else "NO")
    else:
        t.add_row("final loss", f"{r.paddle_loss[-1]:.5f}", f"{r.xla_loss[-1]:.5f}")
        t.add_row("max rel. loss diff", "", f"{r.max_rel_loss_diff:.2e}")
        t.add_row("max rel. weight diff", "", f"{r.max_rel_weight_diff:.2e}")
    t.add_row("MLM / NSP accuracy", _acc(r.paddle_accuracy), _acc(r.xla_accuracy))
    t.add_row("samples/s", f"{r.paddle_samples_per_s:.1f}", f"{r.xla_samples_per_s:.1f} ({r.speedup:.2f}x)")
    t.add_row("first step (compile)", "", f"{r.xla_compile_s:.1f} s")
    return t


def _acc(d) -> str:
    return f"{d.get('mlm', 0):.4f} / {d.get('nsp', 0):.4f}"


def write(r: Report, out_dir: str) -> None:
    from ..files import atomic_write

    os.makedirs(out_dir, exist_ok=True)
    data = {**asdict(r), "speedup": r.speedup}
    atomic_write(os.path.join(out_dir, "report.json"), json.dumps(data, indent=2).encode())
    plot(r, os.path.join(out_dir, "report.png"))


def plot(r: Report, path: str) -> None:
    from ..models.bert_data import import_validate_extra

    matplotlib = import_validate_extra("matplotlib", "the validate report's plot (report.png)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 1]})
    a.plot(r.paddle_loss, label="Paddle", lw=2)
    a.plot(r.xla_loss, "--", label="paddle_xla", lw=2)
    a.set(xlabel="step", ylabel="pretraining loss (MLM + NSP)", title=f"BERT-{r.config}: loss curves")
    a.legend()
    b.bar(["Paddle", "paddle_xla"], [r.paddle_samples_per_s, r.xla_samples_per_s], color=["C0", "C1"])
    b.set(ylabel="samples/s", title="training throughput")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
