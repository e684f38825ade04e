"""`paddle-xla bench bert-base`: BERT training throughput and inference latency, paddle_xla against
native Paddle's best, measured in one run on this machine, with MFU against the matmul peak measured
in the same run.

Paddle's best is the faster of eager and `to_static` for training, and Paddle Inference (oneDNN,
cpu math threads = nproc) for inference. benchmarks/ holds the stricter twins of these measurements
(one process per configuration, interleaved rounds, load accounting); this command is the one-line
answer a user asks for, with any Strategy."""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import StrategyError
from ..planner.perf import bert_flops, bert_pretraining_flops, matmul_peak

PARTS = ("train", "infer")


@dataclass
class BenchSettings:
    config: str = "base"  # BertConfig.named: base | small | tiny
    batch: int = 8
    seq: int = 128
    repeats: int = 3  # timed calls per configuration, after one untimed warm-up
    strategy: Mapping[str, Any] = field(default_factory=dict)
    parts: tuple[str, ...] = PARTS
    paddle: bool = True  # also time native Paddle (the baseline)
    # NOTE: BERT pretraining scores MLM on the masked positions only: 20 per sequence at seq 128 is
    # max_predictions_per_seq of Google's, NVIDIA's and Graphcore's phase 1. 0: every token.
    max_predictions: int = 20


def parse_strategy(text: str | None) -> dict[str, Any]:
    """'replicas=2,precision=bf16,recompute=layer' -> Strategy keyword arguments."""
    out: dict[str, Any] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise StrategyError(f"--strategy item {item!r} is not KEY=VALUE, e.g. replicas=2,precision=bf16.")
        out[key.strip()] = _value(value.strip())
    return out


def _value(text: str) -> Any:
    if text.lstrip("-").isdigit():
        return int(text)
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return None if lowered == "none" else text


def time_calls(fn: Callable[[], Any], repeats: int) -> dict[str, Any]:
    """One untimed call, then `repeats` timed ones (fn must block until its result is ready)."""
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return {"median_s": statistics.median(samples), "min_s": min(samples), "repeats": repeats}


# ---- the model and data -------------------------------------------------------------------------


def _bert(s: BenchSettings, head: bool):
    import paddle

    from ..models.bert import BertConfig, BertForPretraining, BertModel

    paddle.seed(0)
    cfg = BertConfig.named(s.config).without_dropout()
    return cfg, (BertForPretraining(cfg) if head else BertModel(cfg))


def _pretraining_batch(cfg, s: BenchSettings) -> list[np.ndarray]:
    from ..models.bert_data import synthetic_batch

    batch = synthetic_batch(cfg, s.batch, s.seq)
    return batch.with_masked_positions(s.max_predictions) if s.max_predictions else batch.as_list()


def _pretraining_spec(s: BenchSettings):
    from ..models.bert import BertForPretraining

    return BertForPretraining.input_spec(s.seq, s.max_predictions)


def _adamw(net):
    import paddle

    return paddle.optimizer.AdamW(1e-4, parameters=net.parameters(), weight_decay=0.01)


# ---- training -----------------------------------------------------------------------------------


def paddle_train(s: BenchSettings, static: bool) -> dict[str, Any]:
    """Native Paddle's training step, timed: eager, or the to_static program (its backward is Paddle's)."""
    return time_calls(paddle_train_step(s, static), s.repeats)


def paddle_train_step(s: BenchSettings, static: bool) -> Callable[[], float]:
    """One native Paddle training step per call.

    NOTE: no bf16 AMP variant: on CPU, Paddle 3.3's auto_cast warns that amp_guard needs a CUDA, XPU or
    custom place and runs fp32 (timed in an earlier run: 12.40 s against eager's 11.33 s)."""
    import paddle

    cfg, net = _bert(s, head=True)
    opt = _adamw(net)
    if static:
        net = paddle.jit.to_static(net, input_spec=_pretraining_spec(s), full_graph=True)
    batch = [paddle.to_tensor(x) for x in _pretraining_batch(cfg, s)]

    def step():
        loss = net(*batch)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return float(loss)

    return step


def xla_train(s: BenchSettings) -> dict[str, Any]:
    """paddle_xla's compiled step (forward, grads, AdamW) under the Strategy, timed."""
    step, info = xla_train_step(s)
    return {**time_calls(step, s.repeats), **info}


def xla_train_step(s: BenchSettings) -> tuple[Callable[[], Any], dict[str, Any]]:
    """(one paddle_xla step per call, {steps_per_call, capture_and_compile_s}); compiled on return."""
    import paddle_xla as px

    cfg, net = _bert(s, head=True)
    strategy = px.Strategy(**s.strategy)
    start = time.perf_counter()
    step = px.train_step(net, None, _adamw(net), _pretraining_spec(s), strategy=strategy)
    batch = _pretraining_batch(cfg, s)
    if strategy.steps_per_call > 1:
        batch = [np.stack([x] * strategy.steps_per_call) for x in batch]
    step(*batch)
    first = time.perf_counter() - start
    return (lambda: np.asarray(step(*batch))), {
        "steps_per_call": strategy.steps_per_call,
        "capture_and_compile_s": first,
    }


def time_interleaved(builders: Mapping[str, Callable[[], Callable[[], Any]]], rounds: int) -> dict[str, dict]:
    """Build every configuration, then time one call of each per round, `rounds` times.

    NOTE: on a shared machine the speed drifts over minutes; timing configurations back to back
    would give each its own drift, interleaving gives them all the same."""
    steps: dict[str, Any] = {}
    out: dict[str, dict[str, Any]] = {}
    for name, build in builders.items():
        try:
            steps[name] = build()
            steps[name]()  # NOTE: the untimed warm-up call
        except Exception as e:  # NOTE: one failing configuration must not lose the others' figures
            out[name] = {"error": f"{type(e).__name__}: {e}"[:800]}
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            samples[name].append(time.perf_counter() - start)
    for name, xs in samples.items():
        out[name] = {
            "median_s": statistics.median(xs),
            "min_s": min(xs),
            "repeats": rounds,
            "samples_s": [round(x, 4) for x in xs],
            "interleaved": True,
        }
    return out


# ---- inference ----------------------------------------------------------------------------------


def _encoder_inputs(cfg, s: BenchSettings) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(1, cfg.vocab_size, (s.batch, s.seq)).astype("int64")
    types = (np.arange(s.seq)[None, :] >= s.seq // 2).astype("int64").repeat(s.batch, 0)
    return [ids, types]


def paddle_inference(s: BenchSettings) -> dict[str, Any]:
    """Paddle Inference from paddle.jit.save: oneDNN, cpu math threads = nproc, IR optimisation on."""
    call = paddle_inference_call(s)
    result = time_calls(call, s.repeats)
    result["output"] = call()
    return result


def paddle_inference_call(s: BenchSettings) -> Callable[[], np.ndarray]:
    """One call of the Paddle Inference predictor (see paddle_inference), ready to time."""
    import paddle
    import paddle.inference as pi

    from ..models.bert import BertModel

    cfg, net = _bert(s, head=False)
    net.eval()
    inputs = _encoder_inputs(cfg, s)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "bert")
        paddle.jit.save(net, prefix, input_spec=BertModel.input_spec(s.seq))
        model_file = next(prefix + ext for ext in (".json", ".pdmodel") if os.path.exists(prefix + ext))
        config = pi.Config(model_file, prefix + ".pdiparams")
        config.enable_mkldnn()
        config.set_cpu_math_library_num_threads(os.cpu_count() or 1)
        config.switch_ir_optim(True)
        config.disable_glog_info()
        predictor = pi.create_predictor(config)
    handles = [predictor.get_input_handle(n) for n in predictor.get_input_names()]
    out = predictor.get_output_handle(predictor.get_output_names()[0])

    def call():
        for h, x in zip(handles, inputs):
            h.copy_from_cpu(x)
        predictor.run()
        return out.copy_to_cpu()

    return call


def xla_inference(s: BenchSettings) -> dict[str, Any]:
    """paddle_xla's compiled encoder forward; the Strategy's precision applies (fp32 | bf16 | fp16)."""
    call = xla_inference_call(s)
    result = time_calls(call, s.repeats)
    result["precision"] = s.strategy.get("precision", "fp32")
    result["output"] = np.asarray(call()[0])
    return result


def xla_inference_call(s: BenchSettings) -> Callable[[], Any]:
    """One call of the compiled encoder (see xla_inference), blocking until its outputs are ready."""
    import jax

    import paddle_xla as px

    from ..models.bert import BertModel

    cfg, net = _bert(s, head=False)
    net.eval()
    precision = s.strategy.get("precision", "fp32")
    model = px.compile(net, BertModel.input_spec(s.seq), strategy=px.Strategy(precision=precision))
    feeds = [jax.device_put(x) for x in _encoder_inputs(cfg, s)]
    return lambda: jax.block_until_ready(model.compiled.run(*feeds))


# ---- the run ------------------------------------------------------------------------------------


def plan(s: BenchSettings) -> list[tuple[str, str, Callable[[], dict[str, Any]]]]:
    """(part, configuration, measure) in the order they run."""
    jobs = []
    if "train" in s.parts:
        if s.paddle:
            jobs += [
                ("train", "paddle_eager", lambda: paddle_train(s, static=False)),
                ("train", "paddle_to_static", lambda: paddle_train(s, static=True)),
            ]
        jobs.append(("train", "paddle_xla", lambda: xla_train(s)))
    if "infer" in s.parts:
        if s.paddle:
            jobs.append(("infer", "paddle_inference_onednn", lambda: paddle_inference(s)))
        jobs.append(("infer", "paddle_xla", lambda: xla_inference(s)))
    return jobs


def threads_and_peak() -> dict[str, Any]:
    """Give Paddle every core, then measure the matmul peak (perf.matmul_peak).

    NOTE: the thread count must be set before Paddle's math library is first used (it reads the count
    once): all cores, as Paddle's best."""
    import paddle

    paddle.base.core.set_num_threads(os.cpu_count() or 1)
    return matmul_peak(repeats=3)


def run(s: BenchSettings, on_start: Callable[[str, str], None] = lambda part, cfg: None) -> dict[str, Any]:
    """Every configuration of `plan`, the matmul peak, and the ratios; one failure does not lose the rest."""
    from ..models.bert import BertConfig

    on_start("peak", "matmul")
    peak = threads_and_peak()
    results: dict[str, dict[str, Any]] = {p: {} for p in s.parts}
    for part, cfg, measure in plan(s):
        on_start(part, cfg)
        try:
            results[part][cfg] = measure()
        except Exception as e:  # NOTE: one failing configuration must not lose the others' figures
            results[part][cfg] = {"error": f"{type(e).__name__}: {e}"[:800]}
    bert = BertConfig.named(s.config)
    return summarise(s, bert, peak, results)


def run_interleaved(
    s: BenchSettings, builders: Mapping[str, Callable[[], Callable[[], Any]]], rounds: int
) -> dict[str, Any]:
    """Training configurations timed in interleaved rounds (time_interleaved), with the matmul peak."""
    from ..models.bert import BertConfig

    peak = threads_and_peak()
    return summarise(s, BertConfig.named(s.config), peak, {"train": time_interleaved(builders, rounds)})


def summarise(s: BenchSettings, bert, peak, results) -> dict[str, Any]:
    shape = dict(
        layers=bert.num_hidden_layers,
        hidden=bert.hidden_size,
        intermediate=bert.intermediate_size,
        batch=s.batch,
        seq=s.seq,
    )
    head_tokens = s.batch * (s.max_predictions or s.seq)
    flops = {
        "train": bert_pretraining_flops(vocab=bert.vocab_size, head_tokens=head_tokens, **shape),
        "infer": bert_flops(**shape),
    }
    for part, configs in results.items():
        for r in configs.values():
            if "median_s" not in r:
                continue
            add_rates(r, s.batch, flops[part], peak["fp32_gflops"])
        _ratios(configs)
    _parity(results.get("infer", {}))
    return {
        "benchmark": "paddle-xla bench bert",
        "settings": {**s.__dict__, "parts": list(s.parts)},
        "model": f"BERT-{s.config}",
        "flops_per_step": flops,
        "matmul_peak": peak,
        "flops_note": "train: 3 x (encoder + MLM head over the scored tokens) forward, i.e. 6 x matmul "
        "params x tokens + attention, the head's params counted on batch x max_predictions "
        "tokens (every token when max_predictions is 0); infer: the encoder forward; "
        "mfu_fp32 = achieved / measured jnp fp32 matmul peak",
        "results": results,
    }


def add_rates(r: dict[str, Any], batch: int, flops: float, peak_gflops: float) -> None:
    """Step time, samples/s, GFLOP/s and MFU (against the fp32 matmul peak) from a timing's median."""
    per_step = r["median_s"] / r.get("steps_per_call", 1)
    r.update(step_s=per_step, samples_per_s=batch / per_step, gflops=flops / per_step / 1e9)
    r["mfu_fp32"] = r["gflops"] / peak_gflops


def _ratios(configs: dict[str, dict[str, Any]]) -> None:
    paddle_best = min(
        (r["step_s"] for c, r in configs.items() if not c.startswith("paddle_xla") and "step_s" in r), default=None
    )
    for r in configs.values():
        if paddle_best and "step_s" in r:
            r["speedup_vs_paddle_best"] = paddle_best / r["step_s"]


def _parity(infer: dict[str, dict[str, Any]]) -> None:
    """paddle_xla's encoder output against Paddle Inference's (max |diff| over the largest |output|)."""
    ref = infer.get("paddle_inference_onednn", {}).pop("output", None)
    got = infer.get("paddle_xla", {}).pop("output", None)
    if ref is not None and got is not None:
        infer["paddle_xla"]["max_rel_diff_vs_paddle"] = float(np.abs(got - ref).max() / np.abs(ref).max())


def write(report: Mapping[str, Any], path: str) -> None:
    from ..files import atomic_write

    atomic_write(path, json.dumps(report, indent=1).encode())


def rows(report: Mapping[str, Any]) -> list[list[str]]:
    """The summary table: part, configuration, time, samples/s, MFU, speed-up vs Paddle's best."""
    out = []
    for part, configs in report["results"].items():
        for cfg, r in configs.items():
            if "step_s" not in r:
                out.append([part, cfg, "failed: " + r.get("error", "?")[:70], "", "", ""])
                continue
            speed = r.get("speedup_vs_paddle_best")
            out.append(
                [
                    part,
                    cfg,
                    f"{1e3 * r['step_s']:.0f} ms",
                    f"{r['samples_per_s']:.2f}",
                    f"{r['mfu_fp32']:.0%}",
                    "" if speed is None else f"{speed:.2f}x",
                ]
            )
    return out
