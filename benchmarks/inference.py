"""Inference latency of paddle_xla against native Paddle's best configuration, in one run.

    .venv/bin/python benchmarks/inference.py                  # BERT-Base and ResNet-50, batch 8
    .venv/bin/python benchmarks/inference.py --quick          # tiny configs, a CI smoke run (< 60 s)
    .venv/bin/python benchmarks/inference.py --models bert --repeats 5
    .venv/bin/python benchmarks/inference.py --models bert --xla-variant ynn_eltwise=--xla_cpu_experimental_ynn_fusion_type=+eltwise

Each configuration lives in a fresh worker process of its own, so a thread count set for one (Paddle's
math library reads it once, at first use) cannot leak into another. The workers are set up one at a
time (so compile times are not contended by our own work), then take turns, so that load from other
processes on a shared machine falls on every configuration alike. A turn is one untimed call and one
timed call (--turn-warmup): the timed call is a warm one, as in a server answering a stream of requests.
Timing the first call of a turn instead penalised XLA alone: right after another worker's turn, paddle_xla
bf16 BERT ran bimodally (465-475 or 500-520 ms) while Paddle Inference's calls were unaffected. Every worker builds
the same weights from the same seed, and the outputs are compared with Paddle eager's. The machine's
matmul peak is measured in the same run, and the JSON lands in benchmarks/results/inference.json.
"""  # noqa: E501 (a shell command, kept on one line to copy and paste)

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "inference.json")

# name -> (runner kind, thread count forced to nproc?, what it is)
CONFIGS: dict[str, tuple[str, bool, str]] = {
    "paddle_xla": ("xla", False, "px.compile; model.compiled.run + block_until_ready"),
    "paddle_xla_bf16": (
        "xla",
        False,
        "px.compile(strategy=px.Strategy(precision='bf16')): bf16 compute, fp32 weights; outputs compared at 2e-2",
    ),
    "eager": ("eager", False, "Paddle eager, default threads, no_grad"),
    "eager_threads": ("eager", True, "Paddle eager, OMP/MKL threads and core.set_num_threads = nproc"),
    "to_static": ("to_static", False, "paddle.jit.to_static(full_graph=True), default threads"),
    "to_static_threads": ("to_static", True, "paddle.jit.to_static, threads = nproc"),
    "inference_onednn": (
        "inference",
        True,
        "Paddle Inference from paddle.jit.save: enable_mkldnn, cpu math threads = nproc, switch_ir_optim(True)",
    ),
    # NOTE: Paddle 3.3's oneDNN executor refuses some programs (interpolate's double-array scale:
    # "ConvertPirAttribute2RuntimeAttribute not support"); its plain CPU predictor still runs them.
    "inference_plain": (
        "inference",
        True,
        "Paddle Inference without oneDNN, cpu math threads = nproc, switch_ir_optim(True)",
    ),
    # NOTE: paddle_xla keeps freed host memory for reuse (paddle_xla/runtime/host_heap.py); Paddle gets the same
    # malloc policy here, as GLIBC_TUNABLES, so that it is not compared at a disadvantage.
    "inference_onednn_kept_heap": (
        "inference",
        True,
        "inference_onednn under paddle_xla's malloc policy (GLIBC_TUNABLES: one arena, no mmap, no trim)",
    ),
    "inference_plain_kept_heap": (
        "inference",
        True,
        "inference_plain under paddle_xla's malloc policy (GLIBC_TUNABLES: one arena, no mmap, no trim)",
    ),
    "paddle_xla_system_heap": (
        "xla",
        False,
        "paddle_xla with PADDLE_XLA_KEEP_HEAP=0: glibc's default malloc "
        "(freed temporaries go back to the kernel; an A/B of host_heap.py)",
    ),
}
KEPT_HEAP = ("inference_onednn_kept_heap", "inference_plain_kept_heap")
# NOTE: an A/B configuration, run when named in --configs
NOT_BY_DEFAULT = ("paddle_xla_system_heap",)
QUICK_CONFIGS = ["paddle_xla", "eager_threads", "inference_onednn"]
# outputs are compared with the first of these that ran
REFERENCE = (
    "eager",
    "eager_threads",
    "to_static",
    "to_static_threads",
    "inference_onednn",
    "inference_plain",
    *KEPT_HEAP,
)


def is_paddle(cfg: str) -> bool:
    return not cfg.startswith("paddle_xla")


# ---- the models ----------------------------------------------------------------------------------


def model_settings(name: str, batch: int, quick: bool) -> dict[str, Any]:
    """What a worker builds, and the model's analytic (or standard) FLOPs."""
    if name == "bert":
        cfg = dict(config="tiny", seq=16) if quick else dict(config="base", seq=128)
        layers, hidden, inter = {"tiny": (2, 64, 256), "base": (12, 768, 3072)}[cfg["config"]]
        flops = common.bert_flops(layers=layers, hidden=hidden, intermediate=inter, batch=batch, seq=cfg["seq"])
        return {
            **cfg,
            "batch": batch,
            "analytic_flops": flops,
            "description": f"BertModel(BertConfig.{cfg['config']}()), {layers} layers, hidden {hidden}, "
            f"seq {cfg['seq']}, batch {batch}, eval",
            "flops_note": "analytic: 2 x matmul weights x tokens + 2 x 2 x B x S x S x H per layer + pooler",
        }
    if name == "resnet50":
        size = 32 if quick else 224
        return {
            "size": size,
            "batch": batch,
            "analytic_flops": common.resnet50_flops(batch, size),
            "description": f"paddle.vision.models.resnet50(), batch {batch}, 3x{size}x{size}, eval",
            "flops_note": "standard figure: 2 x 4.09 GMACs per 224x224 image (He et al. 2016; torchvision)",
        }
    if name in MOBILE_MACS:
        size = 32 if quick else 224
        macs = MOBILE_MACS[name] * batch * (size / 224) ** 2
        return {
            "size": size,
            "batch": batch,
            "analytic_flops": 2 * macs,
            "description": f"paddle.vision.models.{name}(), batch {batch}, 3x{size}x{size}, eval",
            "flops_note": "the MobileNetV3 paper's multiply-adds per 224x224 image (Howard et al. 2019), x2",
        }
    if name in SUITE_MOBILE:
        from paddle_xla.models.mobile import MOBILE_MACS as counted

        return {
            "batch": batch,
            "analytic_flops": 2 * counted[name] * batch,
            "description": f"paddle_xla.models.mobile {name} ({SUITE_MOBILE[name]}), batch {batch}, eval",
            "flops_note": "multiply-adds of convolutions, linears and LSTMs counted on the model, x2",
        }
    raise SystemExit(
        f"Unknown model {name!r}; choose from bert, resnet50, {', '.join(MOBILE_MACS)}, {', '.join(SUITE_MOBILE)}."
    )


# Paddle's suites' mobile models, written in paddle_xla/models/mobile.py
SUITE_MOBILE = {
    "pp_lcnet": "PP-LCNet x1.0, 3x224x224",
    "picodet_s": "PicoDet-S head without NMS, 3x320x320",
    "ppocr_det": "PP-OCR DB text detector, 3x640x640",
    "ppocr_rec": "PP-OCR CRNN recogniser, 3x48x320",
}


# multiply-adds per 224x224 image, as published
MOBILE_MACS = {"mobilenet_v3_large": 219e6, "mobilenet_v3_small": 56e6}


def build(name: str, settings: dict[str, Any]):
    """(net in eval mode, input_spec, inputs as NumPy), with seeded weights and inputs."""
    import numpy as np
    import paddle
    from paddle.static import InputSpec

    paddle.seed(0)
    rng = np.random.default_rng(0)
    b = settings["batch"]
    if name in SUITE_MOBILE:
        from paddle_xla.models.mobile import mobile_model

        return mobile_model(name, b)
    if name == "bert":
        from paddle_xla.models.bert import BertConfig, BertModel

        cfg = BertConfig.named(settings["config"])
        net = BertModel(cfg)
        seq = settings["seq"]
        ids = rng.integers(1, cfg.vocab_size, (b, seq)).astype("int64")  # no padding (id 0)
        types = (np.arange(seq)[None, :] >= seq // 2).astype("int64").repeat(b, 0)
        specs, inputs = BertModel.input_spec(seq), [ids, types]
    else:
        net = getattr(paddle.vision.models, name)()
        s = settings["size"]
        specs = [InputSpec([None, 3, s, s], "float32", "x")]
        inputs = [rng.standard_normal((b, 3, s, s)).astype("float32")]
    net.eval()
    return net, specs, inputs


# ---- the set-ups (inside a worker): (info, call, outputs) -------------------------------------


def setup_xla(name, settings, job):
    import gc

    import jax

    import paddle_xla as px

    net, specs, inputs = build(name, settings)
    start = time.perf_counter()
    # NOTE: a *_bf16 configuration is the Strategy's mixed precision, timed against Paddle's fp32 best.
    strategy = px.Strategy(precision="bf16") if job["config"].endswith("_bf16") else None
    try:
        model = px.compile(net, specs, strategy=strategy)
    except px.UnsupportedOpsError as e:
        return (
            {
                "status": "unsupported",
                "unsupported_ops": sorted({p.op for p in e.report.problems}),
                "message": str(e)[:4000],
            },
            None,
            None,
        )
    capture_s = time.perf_counter() - start
    del net
    gc.collect()
    feeds = [jax.device_put(x) for x in inputs]

    def call():
        return jax.block_until_ready(model.compiled.run(*feeds))

    start = time.perf_counter()
    call()
    first_call_s = time.perf_counter() - start
    info = {
        "status": "ok",
        "capture_s": capture_s,
        "first_call_s": first_call_s,
        "compile_s": sum(model.compiled.compile_seconds.values()),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "compile_cache": os.environ.get("PADDLE_XLA_CACHE", "1") not in ("0", "false", "off", "no"),
        "counted_flops": _counted_flops(model, feeds),
    }
    return info, call, lambda: _save(job, [jax.device_get(o) for o in call()])


def _counted_flops(model, feeds):
    """Matmul and convolution FLOPs of the program paddle_xla lowered, read off its jaxpr."""
    try:
        # NOTE: the model's own program: a plain lower(graph) would read the HWIO filters as OIHW.
        jaxpr = model.compiled.jaxpr(*feeds)
        by_prim = common.jaxpr_flops(jaxpr)
        return {"total": sum(by_prim.values()), "by_primitive": by_prim}
    except Exception as e:  # NOTE: a FLOP count is a nicety; it must never sink the measurement
        return {"error": f"{type(e).__name__}: {e}"}


def setup_eager(name, settings, job):
    import paddle

    net, _, inputs = build(name, settings)
    tensors = [paddle.to_tensor(x) for x in inputs]

    def call():
        with paddle.no_grad():
            return net(*tensors)

    start = time.perf_counter()
    call()
    return {"status": "ok", "first_call_s": time.perf_counter() - start}, call, lambda: _save(job, _numpy(call()))


def setup_to_static(name, settings, job):
    import paddle

    net, specs, inputs = build(name, settings)
    static = paddle.jit.to_static(net, input_spec=specs, full_graph=True)
    tensors = [paddle.to_tensor(x) for x in inputs]

    def call():
        with paddle.no_grad():
            return static(*tensors)

    start = time.perf_counter()
    call()
    return {"status": "ok", "first_call_s": time.perf_counter() - start}, call, lambda: _save(job, _numpy(call()))


def setup_inference(name, settings, job):
    import gc

    import paddle
    import paddle.inference as pi

    net, specs, inputs = build(name, settings)
    prefix = os.path.join(job["workdir"], f"{job['tag']}_saved", "model")
    paddle.jit.save(net, prefix, input_spec=specs)
    del net
    gc.collect()
    model_file = next(prefix + ext for ext in (".json", ".pdmodel") if os.path.exists(prefix + ext))
    config = pi.Config(model_file, prefix + ".pdiparams")
    if job["config"].startswith("inference_onednn"):
        config.enable_mkldnn()
    else:
        config.disable_mkldnn()
    config.set_cpu_math_library_num_threads(job["nproc"])
    config.switch_ir_optim(True)
    config.disable_glog_info()
    predictor = pi.create_predictor(config)
    handles = [predictor.get_input_handle(s.name) for s in specs]
    outputs = [predictor.get_output_handle(n) for n in predictor.get_output_names()]

    def call():
        for h, x in zip(handles, inputs):
            h.copy_from_cpu(x)
        predictor.run()

    def outs():
        call()
        return _save(job, [h.copy_to_cpu() for h in outputs])

    start = time.perf_counter()
    call()
    return (
        {"status": "ok", "first_call_s": time.perf_counter() - start, "model_file": os.path.basename(model_file)},
        call,
        outs,
    )


def _numpy(outs):
    return [o.numpy() for o in (outs if isinstance(outs, (list, tuple)) else [outs])]


def _save(job, arrays) -> str:
    import numpy as np

    path = os.path.join(job["workdir"], f"{job['tag']}.outputs.npz")
    np.savez(path, *[np.asarray(a) for a in arrays])
    return path


SETUPS = {"xla": setup_xla, "eager": setup_eager, "to_static": setup_to_static, "inference": setup_inference}


def worker(job_path: str) -> None:
    """One process: the matmul peak (run once), or one configuration served turn by turn."""
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    if job["kind"] in ("peak", "paddle_peak"):
        if job["kind"] == "peak":
            result = {"matmul_peak": common.matmul_peak(job["sizes"], job["repeats"]), "machine": common.machine_info()}
        else:
            import paddle

            paddle.base.core.set_num_threads(job["nproc"])
            result = common.paddle_matmul_rate(job["sizes"], job["repeats"])
        with open(job["out"], "w", encoding="utf-8") as f:
            json.dump(result, f)
        return
    import paddle

    if job["threads"]:
        # NOTE: before Paddle's math library is first used; it reads the count once.
        paddle.base.core.set_num_threads(job["nproc"])

    def setup_for(entry):
        def setup():
            start = time.perf_counter()
            info, call, outputs = SETUPS[entry["runner"]](entry["model"], entry["settings"], {**job, **entry})
            info["setup_s"] = time.perf_counter() - start
            return info, call, outputs

        return setup

    common.serve({key: setup_for(entry) for key, entry in job["entries"].items()})


# ---- the parent ---------------------------------------------------------------------------------


def thread_env(threads: bool, n: int) -> dict[str, str | None]:
    return {k: (str(n) if threads else None) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}


def config_env(cfg: str, args, n: int, variants) -> dict[str, str | None]:
    kind, threads, _ = CONFIGS.get(cfg, ("xla", False, ""))
    env = thread_env(threads, n)
    if is_paddle(cfg) or cfg == "paddle_xla_system_heap":
        env.update(common.paddle_env(kept_heap=cfg in KEPT_HEAP))
    if kind == "xla":
        env["PADDLE_XLA_CACHE"] = "1" if args.compile_cache else "0"  # NOTE: a cold compile, timed
        flags = variants.get(cfg, args.xla_flags)
        if flags is not None:
            env["XLA_FLAGS"] = flags
    return env


def entry(model: str, cfg: str, settings) -> tuple[str, dict[str, Any]]:
    tag = f"{model}.{cfg}".replace("[", "_").replace("]", "")
    return tag, {
        "model": model,
        "config": cfg,
        "runner": CONFIGS.get(cfg, ("xla",))[0],
        "settings": settings,
        "tag": tag,
    }


def start_workers(models, configs, settings, args, n, script, workdir, variants):
    """{(model, cfg): (worker, key)}: a worker per configuration, or with --quick one for all of them
    (every thread count at nproc; one Paddle import instead of many)."""
    slots = {}
    own = [c for c in configs if c in variants or not args.quick]  # NOTE: a variant's XLA_FLAGS are its own
    shared = [c for c in configs if c not in own]
    if shared:
        entries = dict(entry(m, c, settings[m]) for m in models for c in shared)
        env = thread_env(True, n)
        env.update({k: v for k, v in config_env("paddle_xla", args, n, variants).items() if k not in env})
        w = common.Worker(
            script,
            {"kind": "serve", "threads": True, "nproc": n, "workdir": workdir, "entries": entries},
            env=env,
            workdir=workdir,
            tag="quick",
        )
        slots = {(m, c): (w, entry(m, c, settings[m])[0]) for m in models for c in shared}
    if own:
        for m in models:
            for c in own:
                key, e = entry(m, c, settings[m])
                job = {
                    "kind": "serve",
                    "threads": CONFIGS.get(c, ("xla", False))[1],
                    "nproc": n,
                    "workdir": workdir,
                    "entries": {key: e},
                }
                slots[(m, c)] = (
                    common.Worker(script, job, env=config_env(c, args, n, variants), workdir=workdir, tag=key),
                    key,
                )
    # NOTE: every import finishes before the first set-up, so no compile time is contended by our own imports.
    for w in {id(w): w for w, _ in slots.values()}.values():
        try:
            w.request(None, args.timeout)
        except common.WorkerError as e:
            w.dead = str(e)
    return slots


def measure_model(model, configs, slots, args, n, progress, task, variants):
    """Set each configuration up in turn, then time them in interleaved rounds."""
    timeout = args.timeout
    live = {c: slots[(model, c)] for c in configs}
    results: dict[str, dict[str, Any]] = {}
    own_workers = {id(w): w for w, _ in live.values()}

    def ask(cfg, cmd):
        w, key = live[cfg]
        return w.request(f"{cmd} {key}", timeout)

    def fail(cfg, err):
        w, _ = live.pop(cfg)
        results[cfg] = {"status": "error", "message": str(err), "log_tail": w.log_tail()}

    for cfg in list(live):  # set-ups, one at a time
        progress.update(task, description=f"{model}: setting up {cfg}")
        w, _ = live[cfg]
        try:
            if getattr(w, "dead", None):
                raise common.WorkerError(w.dead)
            info = ask(cfg, "setup")
        except common.WorkerError as e:
            fail(cfg, e)
            continue
        results[cfg] = info
        msg = info.get("status")
        if msg != "ok":
            live.pop(cfg)
        elif "compile_s" in info:
            msg += f", compile {info['compile_s']:.1f} s"
        progress.console.print(f"  {model:9s} {cfg:24s} set up: {msg}", markup=False)
    for _ in range(args.warmup):
        for cfg in list(live):
            try:
                ask(cfg, "warmup")
            except common.WorkerError as e:
                fail(cfg, e)
    active = list(live)
    samples: dict[str, list[dict[str, float]]] = {c: [] for c in active}
    busy0, own0, t0 = common.busy_cpu_seconds(), _own_cpu(own_workers), time.perf_counter()
    progress.update(task, description=f"{model}: timing {len(active)} configurations in turn")
    for r in range(args.repeats):
        for cfg in active[r % len(active) :] + active[: r % len(active)] if active else []:
            if cfg not in live:
                continue
            try:
                for _ in range(args.turn_warmup):
                    ask(cfg, "warmup")
                samples[cfg].append(ask(cfg, "time"))
            except common.WorkerError as e:
                fail(cfg, e)
                continue
            time.sleep(args.gap)
        progress.advance(task)
    elapsed = time.perf_counter() - t0
    busy1, own1 = common.busy_cpu_seconds(), _own_cpu(own_workers)
    foreign = None
    if busy0 is not None and busy1 is not None and elapsed > 0:
        foreign = max(0.0, ((busy1 - busy0) - (own1 - own0)) / (elapsed * n))
    for cfg in list(live):
        s = samples.get(cfg) or []
        if not s:
            continue
        results[cfg]["latency"] = common.latency_stats([x["wall_ms"] for x in s], [x["cpu_ms"] for x in s])
        try:
            if args.back_to_back:
                results[cfg]["latency_back_to_back"] = ask(cfg, "burst")
            results[cfg]["outputs"] = ask(cfg, "finish")["outputs"]
        except (common.WorkerError, KeyError) as e:
            results[cfg]["parity_error"] = str(e)
    for cfg, res in results.items():
        res.setdefault(
            "description", CONFIGS[cfg][2] if cfg in CONFIGS else f"paddle_xla with XLA_FLAGS={variants[cfg]}"
        )
        if "latency" in res:
            progress.console.print(f"  {model:9s} {cfg:24s} {res['latency']['median_ms']:.1f} ms median", markup=False)
    return results, {"foreign_cpu_load": foreign, "timed_phase_s": elapsed}


def _own_cpu(workers) -> float:
    return time.process_time() + sum(w.cpu_seconds() for w in workers.values())


def close_workers(slots, model=None) -> None:
    """Close the workers of `model` (all when None) that serve no other model."""
    keep = {id(w) for (m, _), (w, _) in slots.items() if model is not None and m != model}
    done = set()
    for (m, _), (w, _) in slots.items():
        if (model is None or m == model) and id(w) not in keep and id(w) not in done:
            w.close()
            done.add(id(w))


def output_diff(a_path, b_path) -> tuple[float | None, float | None]:
    """(max |a - b|, that over max |b|) across all outputs."""
    import numpy as np

    a, b = np.load(a_path), np.load(b_path)
    if len(a.files) != len(b.files):
        return None, None
    diff = max(float(np.max(np.abs(a[k].astype("float64") - b[k].astype("float64")))) for k in a.files)
    scale = max(float(np.max(np.abs(b[k].astype("float64")))) for k in b.files)
    return diff, diff / scale if scale else None


def summarise(name, settings, results, peak, timing):
    """Per-model block of the JSON: latencies, FLOPs, Paddle's best, paddle_xla's ratio to it."""
    xla = results.get("paddle_xla", {})
    counted = (xla.get("counted_flops") or {}).get("total")
    if name == "bert" or not counted:
        flops, source = settings["analytic_flops"], settings["flops_note"]
    else:
        flops, source = counted, "counted: conv and matmul FLOPs in paddle_xla's lowered jaxpr (2 per multiply-add)"
    ref_cfg = next((r for r in REFERENCE if results.get(r, {}).get("outputs")), None)
    ref = results[ref_cfg]["outputs"] if ref_cfg else None
    for res in results.values():
        if res.get("status") != "ok" or "latency" not in res:
            res.pop("outputs", None)
            continue
        res["gflops"] = flops / (res["latency"]["median_ms"] / 1e3) / 1e9
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
    timed = {c: r for c, r in results.items() if r.get("status") == "ok" and "latency" in r}
    paddle_ok = {c: r for c, r in timed.items() if is_paddle(c)}
    best = min(paddle_ok, key=lambda c: paddle_ok[c]["latency"]["median_ms"]) if paddle_ok else None
    out = {
        "description": settings["description"],
        "settings": {k: v for k, v in settings.items() if k not in ("analytic_flops", "description", "flops_note")},
        "flops": {
            "used": flops,
            "source": source,
            "analytic_or_standard": settings["analytic_flops"],
            "counted_from_graph": counted,
        },
        "status": xla.get("status", "not run"),
        "timing": timing,
        "configs": results,
    }
    if xla.get("status") == "unsupported":
        out["unsupported_ops"] = xla["unsupported_ops"]
    if best:
        out["paddle_best"] = {"config": best, "median_ms": paddle_ok[best]["latency"]["median_ms"]}
    if best and "paddle_xla" in timed:
        xl, pl = xla["latency"], paddle_ok[best]["latency"]
        vs = {
            "latency_ratio": xl["median_ms"] / pl["median_ms"],
            "speedup": pl["median_ms"] / xl["median_ms"],
            "speedup_min": pl["min_ms"] / xl["min_ms"],
            "note": "latency_ratio = paddle_xla median / Paddle best median; speedup > 1 means paddle_xla is "
            "faster; speedup_min compares the min latencies; cpu_time_ratio = paddle_xla's CPU time "
            "per call / Paddle best's",
        }
        if xl.get("median_cpu_ms") and pl.get("median_cpu_ms"):
            vs["cpu_time_ratio"] = xl["median_cpu_ms"] / pl["median_cpu_ms"]
        out["paddle_xla_vs_paddle_best"] = vs
    if best:
        # every paddle_xla configuration (fp32, bf16, XLA-flag variants) against the same fp32 baseline
        base = paddle_ok[best]["latency"]["median_ms"]
        out["speedup_vs_paddle_best"] = {
            c: base / r["latency"]["median_ms"] for c, r in timed.items() if not is_paddle(c)
        }
        b2b = {c: r["latency_back_to_back"]["median_ms"] for c, r in timed.items() if "latency_back_to_back" in r}
        paddle_b2b = [ms for c, ms in b2b.items() if is_paddle(c)]
        if paddle_b2b:
            # NOTE: Paddle's best back to back may be another configuration than its best in turns
            out["back_to_back"] = {
                "paddle_best_median_ms": min(paddle_b2b),
                "speedup_vs_paddle_best": {c: min(paddle_b2b) / ms for c, ms in b2b.items() if not is_paddle(c)},
            }
    return out


def interference(report) -> dict[str, Any]:
    """How much of the machine other processes took while we measured (this machine may be shared)."""
    loads = [report["matmul_peak"].get("foreign_cpu_load")] + [
        mod["timing"].get("foreign_cpu_load") for mod in report["models"].values()
    ]
    loads = [x for x in loads if x is not None]
    worst = max(loads) if loads else None
    out = {
        "max_foreign_cpu_load": worst,
        "note": "fraction of all CPUs busy with other processes while we timed: /proc/stat's busy time less "
        "our own processes' CPU time",
    }
    if worst is not None and worst > 0.1:
        out["warning"] = (
            f"Other processes used up to {100 * worst:.0f}% of the CPUs while this run timed: wall-clock "
            "latencies are inflated (the configurations took turns, so their ratios are fairer than "
            "their absolute values); the CPU-time columns are less affected. Rerun on an idle machine."
        )
    return out


def markdown(report) -> str:
    peak = report["matmul_peak"]
    m = report["machine"]
    pm = peak.get("paddle_matmul", {})
    lines = [
        f"Machine: {m['cpu_model']}, {m['nproc']} cores. Measured jnp matmul peak: "
        f"{peak['fp32_gflops']:.0f} GFLOP/s fp32 ({peak['fp32_gflops_per_cpu_second']:.0f} per CPU-second), "
        f"{peak['bf16_f32acc_gflops']:.0f} GFLOP/s bf16 x bf16 -> f32"
        + (f"; Paddle's own eager f32 matmul {pm['fp32_gflops']:.0f} GFLOP/s." if "fp32_gflops" in pm else "."),
        "",
        "| model | configuration | median ms | min ms | CPU ms / call | GFLOP/s | % fp32 peak "
        "| % peak, CPU-time basis | speed vs Paddle best |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, mod in report["models"].items():
        best = mod.get("paddle_best", {}).get("median_ms")
        for cfg, res in mod["configs"].items():
            label = cfg + (" (Paddle best)" if cfg == mod.get("paddle_best", {}).get("config") else "")
            if res.get("status") != "ok" or "latency" not in res:
                why = res.get("status", "?")
                if why == "unsupported":
                    why += ": " + ", ".join(res["unsupported_ops"])
                lines.append(f"| {name} | {label} | {why} | | | | | | |")
                continue
            lat = res["latency"]
            rel = f"{best / lat['median_ms']:.2f}x" if best else ""
            cpu = lat.get("median_cpu_ms")
            frac_cpu = res.get("fraction_of_fp32_peak_cpu_time")
            lines.append(
                f"| {name} | {label} | {lat['median_ms']:.1f} | {lat['min_ms']:.1f} "
                f"| {'' if cpu is None else f'{cpu:.1f}'} | {res['gflops']:.1f} "
                f"| {100 * res['fraction_of_fp32_peak']:.1f}% "
                f"| {'' if frac_cpu is None else f'{100 * frac_cpu:.1f}%'} | {rel} |"
            )
    lines.append("")
    if report.get("interference", {}).get("warning"):
        lines += [f"**Warning:** {report['interference']['warning']}", ""]
    for name, mod in report["models"].items():
        xla = mod["configs"].get("paddle_xla", {})
        fl = mod["timing"].get("foreign_cpu_load")
        busy = f" Other processes' share of the CPUs while timing: {100 * fl:.0f}%." if fl is not None else ""
        if xla.get("status") == "ok" and "latency" in xla:
            vs = mod.get("paddle_xla_vs_paddle_best", {})
            cpu = f", CPU time per call {vs['cpu_time_ratio']:.2f}x Paddle best's" if "cpu_time_ratio" in vs else ""
            rel = xla.get("max_rel_diff_vs_paddle")
            lines.append(
                f"- {name}: {mod['description']}; {mod['flops']['used'] / 1e9:.1f} GFLOP per batch. "
                f"paddle_xla compile {xla['compile_s']:.1f} s (capture {xla['capture_s']:.1f} s); "
                f"speedup over Paddle best ({mod.get('paddle_best', {}).get('config')}): "
                f"{vs.get('speedup', float('nan')):.2f}x median, {vs.get('speedup_min', float('nan')):.2f}x min{cpu}; "
                f"max |diff| vs {xla.get('parity_reference')} {xla.get('max_abs_diff_vs_paddle', float('nan')):.1e}"
                f" ({float('nan') if rel is None else rel:.1e} of the largest output).{busy}"
            )
        else:
            lines.append(
                f"- {name}: paddle_xla {xla.get('status', 'not run')}"
                + (f" (missing ops: {', '.join(mod.get('unsupported_ops', []))})" if mod.get("unsupported_ops") else "")
                + (f" ({xla.get('message', '')[:200]})" if xla.get("status") == "error" else "")
                + "."
                + busy
            )
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--models",
        default="bert,resnet50",
        help="comma-separated: bert, resnet50, mobilenet_v3_large, mobilenet_v3_small, "
        "pp_lcnet, picodet_s, ppocr_det, ppocr_rec",
    )
    p.add_argument("--configs", default=None, help=f"comma-separated subset of: {', '.join(CONFIGS)}")
    p.add_argument("--batch", type=int, default=None, help="batch size (default 8; 2 with --quick)")
    p.add_argument(
        "--repeats", type=int, default=None, help="timed calls per configuration (default 10; 3 with --quick)"
    )
    p.add_argument(
        "--warmup", type=int, default=1, help="untimed calls per configuration after the first (compiling) one"
    )
    p.add_argument(
        "--turn-warmup",
        type=int,
        default=1,
        help="untimed calls at the start of each configuration's turn, before its timed call, so that "
        "the timed call is a warm one, as in a server's stream of requests (0: time the first "
        "call after the previous worker's turn)",
    )
    p.add_argument(
        "--gap",
        type=float,
        default=None,
        help="seconds of rest between two turns, so that no worker's spinning threads (OpenMP "
        "spins ~0.2 s after a parallel region) overlap the next one's call (default 0.3; 0.05 with --quick)",
    )
    p.add_argument(
        "--back-to-back",
        action="store_true",
        help="after the rounds, also time each configuration alone, 10 calls back to back",
    )
    p.add_argument("--quick", action="store_true", help="tiny configs for a CI smoke run (< 60 s)")
    p.add_argument("--out", default=None, help=f"JSON path (default {DEFAULT_OUT}; --quick: a *_quick.json beside it)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed for any one request to a worker")
    p.add_argument("--xla-flags", default=None, help="XLA_FLAGS for the paddle_xla worker (recorded in the JSON)")
    p.add_argument(
        "--xla-variant",
        action="append",
        default=[],
        metavar="NAME=FLAGS",
        help="also time paddle_xla under these XLA_FLAGS, as configuration paddle_xla[NAME]; repeatable",
    )
    p.add_argument(
        "--compile-cache",
        action="store_true",
        help="let paddle_xla use its persistent compile cache (default: off, so compile_s is a cold compile)",
    )
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
    configs = (
        [c.strip() for c in args.configs.split(",")]
        if args.configs
        else (QUICK_CONFIGS if args.quick else [c for c in CONFIGS if c not in NOT_BY_DEFAULT])
    )
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        raise SystemExit(f"Unknown configuration(s) {unknown}; choose from {list(CONFIGS)}.")
    variants = {}
    for v in args.xla_variant:
        name, sep, flags = v.partition("=")
        if not sep or not name:
            raise SystemExit(f"--xla-variant wants NAME=FLAGS, got {v!r}.")
        variants[f"paddle_xla[{name}]"] = flags
    configs += list(variants)
    args.batch = args.batch or (2 if args.quick else 8)
    args.repeats = args.repeats or (3 if args.quick else 10)
    args.gap = args.gap if args.gap is not None else (0.05 if args.quick else 0.3)
    out_path = args.out or (DEFAULT_OUT.replace(".json", "_quick.json") if args.quick else DEFAULT_OUT)
    n = common.nproc()
    settings = {m: model_settings(m, args.batch, args.quick) for m in models}
    script = os.path.abspath(__file__)
    started = time.perf_counter()

    with (
        tempfile.TemporaryDirectory(prefix="px_bench_") as workdir,
        Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
        ) as progress,
    ):
        task = progress.add_task("matmul peak (jnp f32 and bf16)", total=1 + len(models) * args.repeats)
        sizes, peak_reps = ((512, 1024), 3) if args.quick else ((2048, 4096), 5)
        peak_res = common.run_worker(
            script,
            {"kind": "peak", "sizes": list(sizes), "repeats": peak_reps},
            env={},
            timeout=args.timeout,
            workdir=workdir,
            tag="peak",
        )
        if not peak_res.ok:
            console.print(f"[red]matmul peak failed[/red]\n{peak_res.log_tail}")
            return 1
        peak, machine = peak_res.data["matmul_peak"], peak_res.data["machine"]
        peak["foreign_cpu_load"] = peak_res.foreign_load
        if not args.quick:
            progress.update(task, description="Paddle's own f32 matmul")
            pp = common.run_worker(
                script,
                {"kind": "paddle_peak", "sizes": list(sizes), "repeats": peak_reps, "nproc": n},
                env=thread_env(True, n),
                timeout=args.timeout,
                workdir=workdir,
                tag="paddle_peak",
            )
            peak["paddle_matmul"] = pp.data if pp.ok else {"error": pp.data.get("error")}
        progress.advance(task)
        report_models = {}
        # NOTE: all workers start now: their imports overlap the peak measurement of nothing else, and a
        # model's workers are set up only when its turn comes.
        slots = start_workers(models, configs, settings, args, n, script, workdir, variants)
        try:
            for m in models:
                results, timing = measure_model(m, configs, slots, args, n, progress, task, variants)
                report_models[m] = summarise(m, settings[m], results, peak, timing)
                close_workers(slots, m)
        finally:
            close_workers(slots)
        report = {
            "benchmark": "inference",
            "command": " ".join(["benchmarks/inference.py", *(argv if argv is not None else sys.argv[1:])]),
            "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine,
            "matmul_peak": peak,
            "settings": {
                "batch": args.batch,
                "repeats": args.repeats,
                "warmup": args.warmup,
                "turn_warmup": args.turn_warmup,
                "gap_s": args.gap,
                "quick": args.quick,
                "configs": configs,
                "xla_flags": args.xla_flags,
                "xla_variants": variants,
                "compile_cache": args.compile_cache,
                "timing": "one worker process per configuration; after set-up (first call, compile) and "
                "`warmup` untimed calls, the workers take turns, `turn_warmup` untimed calls and "
                "one timed call each per round, for `repeats` rounds; median and min over the rounds",
            },
            "models": report_models,
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
    from paddle_xla import x64

    with x64.scope():  # NOTE: Paddle's int64 feeds for the raw JAX calls timed here, as the library's own
        sys.exit(main())
