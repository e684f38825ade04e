"""Inference latency of paddle_xla against native Paddle's best configuration, in one run.

    .venv/bin/python benchmarks/inference.py                  # BERT-Base and ResNet-50, batch 8
    .venv/bin/python benchmarks/inference.py --quick          # tiny configs, a CI smoke run (< 60 s)
    .venv/bin/python benchmarks/inference.py --models bert --repeats 5

Each configuration runs in a fresh worker process, so a thread count set for one (Paddle's math library
reads it once, at first use) cannot leak into another. Every worker builds the same weights from the
same seed; their outputs are compared with Paddle eager's. The machine's matmul peak is measured in the
same run, and the JSON lands in benchmarks/results/inference.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "inference.json")

# name -> (runner kind, thread count forced to nproc?, what it is)
CONFIGS: dict[str, tuple[str, bool, str]] = {
    "paddle_xla": ("xla", False, "px.compile; model.compiled.run + block_until_ready"),
    "eager": ("eager", False, "Paddle eager, default threads, no_grad"),
    "eager_threads": ("eager", True, "Paddle eager, OMP/MKL threads and core.set_num_threads = nproc"),
    "to_static": ("to_static", False, "paddle.jit.to_static(full_graph=True), default threads"),
    "to_static_threads": ("to_static", True, "paddle.jit.to_static, threads = nproc"),
    "inference_onednn": ("inference", True, "Paddle Inference from paddle.jit.save: enable_mkldnn, "
                                            "cpu math threads = nproc, switch_ir_optim(True)"),
}
PADDLE_CONFIGS = [c for c in CONFIGS if c != "paddle_xla"]
QUICK_CONFIGS = ["paddle_xla", "eager_threads", "to_static_threads", "inference_onednn"]
# outputs are compared with the first of these that ran
REFERENCE = ("eager", "eager_threads", "to_static", "to_static_threads", "inference_onednn")


# ---- the models ----------------------------------------------------------------------------------


def model_settings(name: str, batch: int, quick: bool) -> dict[str, Any]:
    """What a worker builds, and the model's analytic FLOPs (None where it is counted instead)."""
    if name == "bert":
        cfg = dict(config="tiny", seq=16) if quick else dict(config="base", seq=128)
        from_cfg = {"tiny": (2, 64, 256), "base": (12, 768, 3072)}[cfg["config"]]
        layers, hidden, inter = from_cfg
        flops = common.bert_flops(layers=layers, hidden=hidden, intermediate=inter, batch=batch, seq=cfg["seq"])
        return {**cfg, "batch": batch, "analytic_flops": flops,
                "description": f"BertModel(BertConfig.{cfg['config']}()), {layers} layers, hidden {hidden}, "
                               f"seq {cfg['seq']}, batch {batch}, eval",
                "flops_note": "analytic: 2 x matmul weights x tokens + 2 x 2 x B x S x S x H per layer + pooler"}
    if name == "resnet50":
        size = 32 if quick else 224
        return {"size": size, "batch": batch, "analytic_flops": common.resnet50_flops(batch, size),
                "description": f"paddle.vision.models.resnet50(), batch {batch}, 3x{size}x{size}, eval",
                "flops_note": "standard figure: 2 x 4.09 GMACs per 224x224 image (He et al. 2016; torchvision)"}
    raise SystemExit(f"Unknown model {name!r}; choose from bert, resnet50.")


def build(name: str, settings: dict[str, Any]):
    """(net in eval mode, input_spec, inputs as NumPy), with seeded weights and inputs."""
    import numpy as np
    import paddle
    from paddle.static import InputSpec
    paddle.seed(0)
    rng = np.random.default_rng(0)
    b = settings["batch"]
    if name == "bert":
        from paddle_xla.models.bert import BertConfig, BertModel
        cfg = BertConfig.named(settings["config"])
        net = BertModel(cfg)
        seq = settings["seq"]
        ids = rng.integers(1, cfg.vocab_size, (b, seq)).astype("int64")   # no padding (id 0)
        types = (np.arange(seq)[None, :] >= seq // 2).astype("int64").repeat(b, 0)
        specs, inputs = BertModel.input_spec(seq), [ids, types]
    else:
        net = paddle.vision.models.resnet50()
        s = settings["size"]
        specs = [InputSpec([None, 3, s, s], "float32", "x")]
        inputs = [rng.standard_normal((b, 3, s, s)).astype("float32")]
    net.eval()
    return net, specs, inputs


# ---- the runners (inside a worker) ------------------------------------------------------------


def run_xla(name, settings, job):
    import jax
    import paddle_xla as px
    net, specs, inputs = build(name, settings)
    start = time.perf_counter()
    try:
        model = px.compile(net, specs)
    except px.UnsupportedOpsError as e:
        return {"status": "unsupported", "unsupported_ops": sorted({p.op for p in e.report.problems}),
                "message": str(e)[:4000]}, None
    capture_s = time.perf_counter() - start
    feeds = [jax.device_put(x) for x in inputs]
    start = time.perf_counter()
    jax.block_until_ready(model.compiled.run(*feeds))
    first_call_s = time.perf_counter() - start
    latency = common.time_calls(lambda: jax.block_until_ready(model.compiled.run(*feeds)),
                                job["repeats"], job["warmup"])
    out = {"status": "ok", "latency": latency, "capture_s": capture_s, "first_call_s": first_call_s,
           "compile_s": sum(model.compiled.compile_seconds.values()),
           "counted_flops": _counted_flops(model, feeds)}
    return out, [jax.device_get(o) for o in model.compiled.run(*feeds)]


def _counted_flops(model, feeds):
    """Matmul and convolution FLOPs of the program paddle_xla lowered, read off its jaxpr."""
    import jax
    from paddle_xla.lower import lower
    try:
        c = model.compiled
        named = dict(zip(c.input_names, feeds))
        jaxpr = jax.make_jaxpr(lower(c.graph))(c.params, c.buffers, named, jax.random.key(0))
        by_prim = common.jaxpr_flops(jaxpr)
        return {"total": sum(by_prim.values()), "by_primitive": by_prim}
    except Exception as e:   # NOTE: a FLOP count is a nicety; it must never sink the measurement
        return {"error": f"{type(e).__name__}: {e}"}


def run_eager(name, settings, job):
    import paddle
    net, _, inputs = build(name, settings)
    tensors = [paddle.to_tensor(x) for x in inputs]
    with paddle.no_grad():
        latency = common.time_calls(lambda: net(*tensors), job["repeats"], job["warmup"])
        outs = net(*tensors)
    return {"status": "ok", "latency": latency}, _numpy_outs(outs)


def run_to_static(name, settings, job):
    import paddle
    net, specs, inputs = build(name, settings)
    static = paddle.jit.to_static(net, input_spec=specs, full_graph=True)
    tensors = [paddle.to_tensor(x) for x in inputs]
    with paddle.no_grad():
        start = time.perf_counter()
        static(*tensors)
        first_call_s = time.perf_counter() - start
        latency = common.time_calls(lambda: static(*tensors), job["repeats"], job["warmup"])
        outs = static(*tensors)
    return {"status": "ok", "latency": latency, "first_call_s": first_call_s}, _numpy_outs(outs)


def run_inference(name, settings, job):
    import paddle
    import paddle.inference as pi
    net, specs, inputs = build(name, settings)
    prefix = os.path.join(job["workdir"], f"{name}_saved", "model")
    paddle.jit.save(net, prefix, input_spec=specs)
    model_file = next(prefix + ext for ext in (".json", ".pdmodel") if os.path.exists(prefix + ext))
    config = pi.Config(model_file, prefix + ".pdiparams")
    config.enable_mkldnn()
    config.set_cpu_math_library_num_threads(job["nproc"])
    config.switch_ir_optim(True)
    config.disable_glog_info()
    predictor = pi.create_predictor(config)
    names = [s.name for s in specs]
    handles = [predictor.get_input_handle(n) for n in names]
    outputs = [predictor.get_output_handle(n) for n in predictor.get_output_names()]

    def call():
        for h, x in zip(handles, inputs):
            h.copy_from_cpu(x)
        predictor.run()

    start = time.perf_counter()
    call()
    first_call_s = time.perf_counter() - start
    latency = common.time_calls(call, job["repeats"], job["warmup"])
    call()
    return ({"status": "ok", "latency": latency, "first_call_s": first_call_s, "model_file": os.path.basename(model_file)},
            [h.copy_to_cpu() for h in outputs])


def _numpy_outs(outs):
    return [o.numpy() for o in (outs if isinstance(outs, (list, tuple)) else [outs])]


RUNNERS = {"xla": run_xla, "eager": run_eager, "to_static": run_to_static, "inference": run_inference}


def worker(job_path: str) -> None:
    """One process: apply the thread setting before Paddle's first use, then run the job's configs."""
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    if job["kind"] == "peak":
        result = {"matmul_peak": common.matmul_peak(job["sizes"], job["repeats"]), "machine": common.machine_info()}
    elif job["kind"] == "paddle_peak":
        import paddle
        paddle.base.core.set_num_threads(job["nproc"])
        result = common.paddle_matmul_rate(job["sizes"], job["repeats"])
    else:
        import numpy as np
        import paddle
        if job["threads"]:
            paddle.base.core.set_num_threads(job["nproc"])
        result = {}
        for config in job["configs"]:
            kind = CONFIGS[config][0]
            start = time.perf_counter()
            try:
                res, outs = RUNNERS[kind](job["model"], job["settings"], job)
            except Exception as e:    # NOTE: one failing configuration must not cost the others
                import traceback
                res, outs = {"status": "error", "message": f"{type(e).__name__}: {e}",
                             "traceback": traceback.format_exc()[-3000:]}, None
            res["wall_s"] = time.perf_counter() - start
            if outs is not None:
                path = os.path.join(job["workdir"], f"{job['model']}.{config}.npz")
                np.savez(path, *[np.asarray(o) for o in outs])
                res["outputs"] = path
            result[config] = res
    with open(job["out"], "w", encoding="utf-8") as f:
        json.dump(result, f)


# ---- the parent ---------------------------------------------------------------------------------


def thread_env(threads: bool, n: int) -> dict[str, str | None]:
    keys = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
    return {k: (str(n) if threads else None) for k in keys}


def plan_jobs(models, configs, quick):
    """(tag, model, configs, threads) per worker process: one configuration each, or in --quick one per
    model with every thread count set to nproc (fewer process start-ups)."""
    jobs = []
    for m in models:
        if quick:
            jobs.append((m, m, list(configs), True))
        else:
            jobs += [(f"{m}.{c}", m, [c], CONFIGS[c][1]) for c in configs]
    return jobs


def output_diff(a_path, b_path) -> tuple[float | None, float | None]:
    """(max |a - b|, that over max |b|) across all outputs."""
    import numpy as np
    a, b = np.load(a_path), np.load(b_path)
    if len(a.files) != len(b.files):
        return None, None
    diff = max(float(np.max(np.abs(a[k].astype("float64") - b[k].astype("float64")))) for k in a.files)
    scale = max(float(np.max(np.abs(b[k].astype("float64")))) for k in b.files)
    return diff, diff / scale if scale else None


def summarise(name, settings, results, peak):
    """Per-model block of the JSON: latencies, FLOPs, Paddle's best, paddle_xla's ratio to it."""
    xla = results.get("paddle_xla", {})
    counted = (xla.get("counted_flops") or {}).get("total")
    if name == "bert" or not counted:
        flops, source = settings["analytic_flops"], settings["flops_note"]
    else:
        flops, source = counted, "counted: conv and matmul FLOPs in paddle_xla's lowered jaxpr (2 per multiply-add)"
    ref_cfg = next((r for r in REFERENCE if results.get(r, {}).get("outputs")), None)
    ref = results[ref_cfg]["outputs"] if ref_cfg else None
    for cfg, res in results.items():
        if res.get("status") != "ok":
            continue
        med = res["latency"]["median_ms"] / 1e3
        res["gflops"] = flops / med / 1e9
        res["fraction_of_fp32_peak"] = res["gflops"] / peak["fp32_gflops"]
        cpu_ms = res["latency"].get("median_cpu_ms")
        if cpu_ms:
            # NOTE: the load-robust twin of the two above: work per CPU-second against the matmul's.
            res["gflop_per_cpu_second"] = flops / (cpu_ms / 1e3) / 1e9
            res["fraction_of_fp32_peak_cpu_time"] = res["gflop_per_cpu_second"] / peak["fp32_gflops_per_cpu_second"]
        if ref and res.get("outputs"):
            res["max_abs_diff_vs_paddle"], res["max_rel_diff_vs_paddle"] = output_diff(res["outputs"], ref)
            res["parity_reference"] = ref_cfg
        res.pop("outputs", None)
        res["description"] = CONFIGS[cfg][2]
    paddle_ok = {c: r for c, r in results.items() if c != "paddle_xla" and r.get("status") == "ok"}
    best = min(paddle_ok, key=lambda c: paddle_ok[c]["latency"]["median_ms"]) if paddle_ok else None
    out = {"description": settings["description"], "settings": {k: v for k, v in settings.items()
                                                                 if k not in ("analytic_flops", "description", "flops_note")},
           "flops": {"used": flops, "source": source, "analytic_or_standard": settings["analytic_flops"],
                     "counted_from_graph": counted},
           "status": xla.get("status", "not run"), "configs": results}
    if xla.get("status") == "unsupported":
        out["unsupported_ops"] = xla["unsupported_ops"]
    if best:
        out["paddle_best"] = {"config": best, "median_ms": paddle_ok[best]["latency"]["median_ms"]}
    if best and xla.get("status") == "ok":
        x, p = xla["latency"]["median_ms"], paddle_ok[best]["latency"]["median_ms"]
        out["paddle_xla_vs_paddle_best"] = {"latency_ratio": x / p, "speedup": p / x,
                                            "speedup_min": paddle_ok[best]["latency"]["min_ms"] / xla["latency"]["min_ms"],
                                            "note": "latency_ratio = paddle_xla median / Paddle best median; "
                                                    "speedup > 1 means paddle_xla is faster; speedup_min compares "
                                                    "the min latencies"}
        xc, pc = xla["latency"].get("median_cpu_ms"), paddle_ok[best]["latency"].get("median_cpu_ms")
        if xc and pc:
            out["paddle_xla_vs_paddle_best"]["cpu_time_ratio"] = xc / pc
    return out


def interference(report) -> dict[str, Any]:
    """How much of the machine other processes took while we measured (this machine may be shared)."""
    loads = [report["matmul_peak"].get("foreign_cpu_load")] + [
        r.get("foreign_cpu_load") for mod in report["models"].values() for r in mod["configs"].values()]
    loads = [x for x in loads if x is not None]
    worst = max(loads) if loads else None
    out = {"max_foreign_cpu_load": worst,
           "note": "fraction of all CPUs busy with other processes during a worker, from /proc/stat less the "
                   "worker's own CPU time"}
    if worst is not None and worst > 0.1:
        out["warning"] = (f"Other processes used up to {100 * worst:.0f}% of the CPUs during this run: latencies "
                          "are inflated and noisy; prefer min_ms, and rerun on an idle machine.")
    return out


def markdown(report) -> str:
    peak = report["matmul_peak"]
    m = report["machine"]
    pm = peak.get("paddle_matmul", {})
    lines = [f"Machine: {m['cpu_model']}, {m['nproc']} cores. Measured jnp matmul peak: "
             f"{peak['fp32_gflops']:.0f} GFLOP/s fp32 ({peak['fp32_gflops_per_cpu_second']:.0f} per CPU-second), "
             f"{peak['bf16_f32acc_gflops']:.0f} GFLOP/s bf16 x bf16 -> f32"
             + (f"; Paddle's own f32 matmul {pm['fp32_gflops']:.0f} GFLOP/s." if "fp32_gflops" in pm else "."),
             "",
             "| model | configuration | median ms | min ms | CPU ms / call | GFLOP/s | % fp32 peak | % peak, CPU-time basis "
             "| speed vs Paddle best | others' CPU |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, mod in report["models"].items():
        best = mod.get("paddle_best", {}).get("median_ms")
        for cfg, res in mod["configs"].items():
            label = cfg + (" (Paddle best)" if cfg == mod.get("paddle_best", {}).get("config") else "")
            if res.get("status") != "ok":
                why = res.get("status", "?")
                if why == "unsupported":
                    why += ": " + ", ".join(res["unsupported_ops"])
                lines.append(f"| {name} | {label} | {why} | | | | | | | |")
                continue
            lat = res["latency"]
            rel = f"{best / lat['median_ms']:.2f}x" if best else ""
            fl = res.get("foreign_cpu_load")
            cpu = lat.get("median_cpu_ms")
            cpu_frac = res.get("fraction_of_fp32_peak_cpu_time")
            lines.append(f"| {name} | {label} | {lat['median_ms']:.1f} | {lat['min_ms']:.1f} "
                         f"| {'' if cpu is None else f'{cpu:.1f}'} | {res['gflops']:.1f} "
                         f"| {100 * res['fraction_of_fp32_peak']:.1f}% | {'' if cpu_frac is None else f'{100 * cpu_frac:.1f}%'} "
                         f"| {rel} | {'' if fl is None else f'{100 * fl:.0f}%'} |")
    lines.append("")
    if report.get("interference", {}).get("warning"):
        lines += [f"**Warning:** {report['interference']['warning']}", ""]
    for name, mod in report["models"].items():
        xla = mod["configs"].get("paddle_xla", {})
        if xla.get("status") == "ok":
            vs = mod.get("paddle_xla_vs_paddle_best", {})
            cpu = f", CPU time per call {vs['cpu_time_ratio']:.2f}x Paddle best's" if "cpu_time_ratio" in vs else ""
            lines.append(f"- {name}: {mod['description']}; {mod['flops']['used'] / 1e9:.1f} GFLOP per batch. "
                         f"paddle_xla compile {xla['compile_s']:.1f} s (capture {xla['capture_s']:.1f} s); "
                         f"speedup over Paddle best ({mod.get('paddle_best', {}).get('config')}): "
                         f"{vs.get('speedup', float('nan')):.2f}x median, {vs.get('speedup_min', float('nan')):.2f}x min{cpu}; "
                         f"max |diff| vs {xla.get('parity_reference')} {xla.get('max_abs_diff_vs_paddle', float('nan')):.1e} "
                         f"({xla.get('max_rel_diff_vs_paddle') or float('nan'):.1e} of the largest output).")
        else:
            lines.append(f"- {name}: paddle_xla {xla.get('status', 'not run')}"
                         + (f" (missing ops: {', '.join(mod.get('unsupported_ops', []))})" if mod.get("unsupported_ops") else "")
                         + (f" ({xla.get('message', '')[:200]})" if xla.get("status") == "error" else "") + ".")
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="bert,resnet50", help="comma-separated: bert, resnet50")
    p.add_argument("--configs", default=None, help=f"comma-separated subset of: {', '.join(CONFIGS)}")
    p.add_argument("--batch", type=int, default=None, help="batch size (default 8; 2 with --quick)")
    p.add_argument("--repeats", type=int, default=None, help="timed calls per configuration (default 10; 3 with --quick)")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls before timing (after the first, compiling call)")
    p.add_argument("--quick", action="store_true", help="tiny configs for a CI smoke run (< 60 s)")
    p.add_argument("--out", default=None, help=f"JSON path (default {DEFAULT_OUT}; --quick: a *_quick.json beside it)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per worker process")
    p.add_argument("--xla-flags", default=None, help="XLA_FLAGS for the paddle_xla worker, e.g. to compare "
                   "--xla_cpu_use_onednn=true (recorded in the JSON)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    configs = [c.strip() for c in args.configs.split(",")] if args.configs else (
        QUICK_CONFIGS if args.quick else list(CONFIGS))
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        raise SystemExit(f"Unknown configuration(s) {unknown}; choose from {list(CONFIGS)}.")
    batch = args.batch or (2 if args.quick else 8)
    repeats = args.repeats or (3 if args.quick else 10)
    out_path = args.out or (DEFAULT_OUT.replace(".json", "_quick.json") if args.quick else DEFAULT_OUT)
    n = common.nproc()
    settings = {m: model_settings(m, batch, args.quick) for m in models}
    jobs = plan_jobs(models, configs, args.quick)
    script = os.path.abspath(__file__)
    started = time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="px_bench_") as workdir, Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(), console=console) as progress:
        overall = progress.add_task("inference benchmark", total=len(jobs) + 1)
        progress.update(overall, description="matmul peak (jnp f32 and bf16)")
        sizes, peak_reps = ((512, 1024), 2) if args.quick else ((2048, 4096), 5)
        peak_res = common.run_worker(script, {"kind": "peak", "sizes": list(sizes), "repeats": peak_reps},
                                     env={}, timeout=args.timeout, workdir=workdir, tag="peak")
        if not peak_res.ok:
            console.print(f"[red]matmul peak failed[/red]\n{peak_res.log_tail}")
            return 1
        peak, machine = peak_res.data["matmul_peak"], peak_res.data["machine"]
        peak["foreign_cpu_load"] = peak_res.foreign_load
        pp = None if args.quick else common.run_worker(script, {"kind": "paddle_peak", "sizes": list(sizes), "repeats": peak_reps, "nproc": n},
                               env=thread_env(True, n), timeout=args.timeout, workdir=workdir, tag="paddle_peak")
        if pp is not None:
            peak["paddle_matmul"] = pp.data if pp.ok else {"error": pp.data.get("error")}
        progress.advance(overall)
        results: dict[str, dict[str, Any]] = {m: {} for m in models}
        for tag, model, cfgs, threads in jobs:
            progress.update(overall, description=f"{model}: {', '.join(cfgs)}")
            job = {"kind": "model", "model": model, "configs": cfgs, "threads": threads, "nproc": n,
                   "settings": settings[model], "repeats": repeats, "warmup": args.warmup, "workdir": workdir}
            env = thread_env(threads, n)
            if args.xla_flags and "paddle_xla" in cfgs:
                env["XLA_FLAGS"] = args.xla_flags
            res = common.run_worker(script, job, env=env, timeout=args.timeout, workdir=workdir, tag=tag)
            for c in cfgs:
                results[model][c] = r = res.data.get(c, {"status": "error", "message": res.data.get("error", "no result"),
                                                         "log_tail": res.data.get("log_tail", "")}) if res.ok else \
                    {"status": "error", "message": res.data["error"], "log_tail": res.data["log_tail"]}
                r["foreign_cpu_load"] = res.foreign_load
                r["load_average_at_start"] = res.load_average
                if c == "paddle_xla" and args.xla_flags:
                    r["xla_flags"] = args.xla_flags
                msg = f"{r['latency']['median_ms']:.1f} ms" if r.get("status") == "ok" else r.get("status")
                other = f"  (other processes: {100 * res.foreign_load:.0f}% of the CPUs)" if res.foreign_load else ""
                progress.console.print(f"  {model:9s} {c:18s} {msg}{other}")
            progress.advance(overall)
        report = {
            "benchmark": "inference",
            "command": " ".join(["benchmarks/inference.py", *(argv if argv is not None else sys.argv[1:])]),
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": machine, "matmul_peak": peak,
            "settings": {"batch": batch, "repeats": repeats, "warmup": args.warmup, "quick": args.quick,
                         "configs": configs, "one_process_per_config": not args.quick,
                         "timing": "median and min over `repeats` timed calls after `warmup` untimed ones; the "
                                   "first (compiling) call is timed separately as first_call_s / compile_s"},
            "models": {m: summarise(m, settings[m], results[m], peak) for m in models},
            "wall_s": None,
        }
        report["interference"] = interference(report)
        report["wall_s"] = time.perf_counter() - started
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    print(markdown(report))
    console.print(f"\nWrote {out_path} in {report['wall_s']:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
