"""Serving throughput and latency: `paddle-xla serve` against the same artifact called offline, and
against Paddle Inference behind the same HTTP stack, in one run.

    .venv/bin/python benchmarks/serve.py                     # BERT-Base (seq 128, bf16) and ResNet-50
    .venv/bin/python benchmarks/serve.py --quick             # tiny models, a smoke run (< 60 s)
    .venv/bin/python benchmarks/serve.py --models resnet50 --concurrency 1,32 --seconds 20

For each model: a Paddle process builds it, exports the .pxa (symbolic batch) and paddle.jit.saves
it. A Paddle-free process calls the artifact in-process at batch 1, 8 and 32 (offline throughput)
and records its answer for every input. Then `paddle-xla serve` runs in a subprocess, with dynamic
batching and again without, and C closed-loop tritonclient clients (C = 1, 8, 32, 128) send one-row
requests. Last, Paddle Inference (oneDNN, threads = nproc) serves the same model over the same
Starlette/uvicorn stack and KServe v2 protocol, one request per predictor call. Every answer is
checked against the answer for its own input. The goals of issue 16 are printed PASS or MISS, and
the JSON lands in benchmarks/results/serve.json."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import common  # noqa: E402
import serve_load  # noqa: E402
from serve_workers import load_pool  # noqa: E402

DEFAULT_OUT = os.path.join(HERE, "results", "serve.json")
START_TIMEOUT_S = 900
LISTENING = re.compile(r"listening on (?:http://127\.0\.0\.1:)?(\d+)")
SINGLE_CALL = re.compile(r"single call ([\d.]+) ms")
# NOTE: served answers come from batches of other sizes than the offline reference's batch 1; XLA
# may block a GEMM differently per shape, and in bf16 a changed rounding can carry through a layer.
TOLERANCE = {False: (1e-4, 1e-5), True: (2e-2, 2e-2)}  # bf16 -> (rtol, atol)


def model_settings(name: str, quick: bool, pool: int) -> dict:
    if name == "bert":
        return {
            "config": "tiny" if quick else "base",
            "seq": 16 if quick else 128,
            "bf16": True,
            "pool": pool,
            "description": f"BertForSequenceClassification(BertConfig.{'tiny' if quick else 'base'}()), "
            f"seq {16 if quick else 128}, Strategy(precision='bf16')",
        }
    if name in ("resnet50", "resnet50_bf16"):
        size, bf16 = 32 if quick else 224, name.endswith("_bf16")
        return {
            "arch": "resnet50",
            "size": size,
            "bf16": bf16,
            "pool": pool,
            "description": f"paddle.vision.models.resnet50(), 3x{size}x{size}, "
            + ("Strategy(precision='bf16')" if bf16 else "fp32"),
        }
    raise SystemExit(f"Unknown model {name!r}; choose bert, resnet50 or resnet50_bf16.")


# ---- the processes ---------------------------------------------------------------------------------


def run_job(kind: str, job: dict, workdir: str, env: dict, timeout: float) -> dict:
    path = os.path.join(workdir, f"{job['model']}_{kind}.json")
    job = {**job, "result": path.replace(".json", ".result.json")}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(job, f)
    done = subprocess.run(
        [sys.executable, os.path.join(HERE, "serve_workers.py"), kind, path],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"{kind} for {job['model']} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    with open(job["result"], encoding="utf-8") as f:
        return json.load(f)


class Service:
    """A server subprocess that prints 'listening on ...'; ready when /v2/health/ready says 200."""

    def __init__(self, argv: list[str], env: dict):
        start = time.monotonic()
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self.port: int | None = None
        self.listening = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        self._wait_ready()
        self.ready_s = time.monotonic() - start

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            match = LISTENING.search(line)
            if match and self.port is None:
                self.port = int(match.group(1))
                self.listening.set()
        self.listening.set()

    def _wait_ready(self):
        import urllib.request

        deadline = time.monotonic() + START_TIMEOUT_S
        if not self.listening.wait(START_TIMEOUT_S) or self.port is None:
            self.stop()
            raise SystemExit("The server did not start:\n" + "\n".join(self.lines[-40:]))
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://{self.url}/v2/health/ready", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise SystemExit("The server was not ready in time:\n" + "\n".join(self.lines[-40:]))

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


# ---- one model ------------------------------------------------------------------------------------


def bench_model(name: str, args, workdir: str, env: dict, progress) -> dict:
    settings = model_settings(name, args.quick, args.pool)
    files = {
        "artifact": os.path.join(workdir, "repo", name, f"{name}.pxa"),
        "paddle_prefix": os.path.join(workdir, f"{name}_paddle", "model"),
        "pool": os.path.join(workdir, f"{name}_pool.npz"),
    }
    os.makedirs(os.path.dirname(files["artifact"]), exist_ok=True)
    job = {"model": name, "settings": settings, **files}
    progress(f"{name}: capture and export")
    prepared = run_job("prepare", job, workdir, env, args.timeout)
    progress(f"{name}: offline calls at batch {args.batches}")
    offline = run_job(
        "offline",
        {
            **job,
            "answers": os.path.join(workdir, f"{name}_xla_answers.npz"),
            "batches": args.batches,
            "repeats": args.repeats,
        },
        workdir,
        env,
        args.timeout,
    )
    pool, answers = load_pool(files["pool"]), load_pool(os.path.join(workdir, f"{name}_xla_answers.npz"))
    tol = TOLERANCE[settings["bf16"]]
    level = dict(model=name, input_names=prepared["input_names"], output_names=offline["output_names"], pool=pool)
    result = {"settings": settings, "export_s": prepared["export_s"], "offline": offline["batches"], "served": {}}
    folder = os.path.dirname(files["artifact"])
    for batching in (True, False):
        flags = (
            ["--max-batch-size", str(args.max_batch), "--max-queue-delay-us", str(args.delay_us)]
            if batching
            else ["--no-batching", "--max-batch-size", "1"]
        )
        key = "paddle_xla_batching" if batching else "paddle_xla_no_batching"
        progress(f"{name}: {key}: starting (compiles every padded batch size)")
        server = Service([sys.executable, "-m", "paddle_xla.cli", "serve", folder, "--port", "0", *flags], env)
        levels = {}
        for c in args.concurrency:
            expected = expected_latency_s(c, offline["batches"], args.max_batch if batching else 1)
            levels[str(c)] = measure(server.url, level, c, expected, answers, tol, args, progress, f"{name} {key}")
        # NOTE: the server's own account of how it splits a batch (measured at its warm-up, plan.py)
        plans = [line.split(": ", 2)[-1] for line in server.lines if ": batches of at most " in line]
        result["served"][key] = {
            "flags": flags,
            "ready_s": server.ready_s,
            "levels": levels,
            "batch_plan": plans,
            "exit_status": server.stop(),
        }
    result["served"]["paddle_inference"] = bench_paddle(name, job, level, offline, workdir, env, args, progress)
    paddle_answers = load_pool(os.path.join(workdir, f"{name}_paddle_answers.npz"))
    result["max_abs_diff_xla_vs_paddle"] = max(float(np.max(np.abs(a - b))) for a, b in zip(answers, paddle_answers))
    return result


def bench_paddle(name, job, level, offline, workdir, env, args, progress) -> dict:
    progress(f"{name}: Paddle Inference service: starting")
    answers_path = os.path.join(workdir, f"{name}_paddle_answers.npz")
    paddle_job = {
        **job,
        "answers": answers_path,
        "input_names": level["input_names"],
        "output_names": level["output_names"],
        "threads": common.nproc(),
    }
    path = os.path.join(workdir, f"{name}_paddle.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(paddle_job, f)
    # NOTE: under the malloc policy paddle_xla's server runs with
    env = {**env, **common.paddle_env(kept_heap=True)}
    service = Service([sys.executable, os.path.join(HERE, "serve_workers.py"), "paddle", path], env)
    single = next(float(m.group(1)) / 1e3 for line in service.lines if (m := SINGLE_CALL.search(line)))
    answers = load_pool(answers_path)
    levels = {}
    for c in args.concurrency:
        levels[str(c)] = measure(
            service.url, level, c, c * single, answers, TOLERANCE[False], args, progress, f"{name} paddle_inference"
        )
    return {"single_call_ms": single * 1e3, "ready_s": service.ready_s, "levels": levels, "exit_status": service.stop()}


def expected_latency_s(clients: int, offline: dict, max_batch: int) -> float:
    """What a request should wait at this concurrency: the batches queued ahead of it, each timed offline."""
    batch = min(clients, max_batch)
    timed = sorted(int(b) for b in offline)
    nearest = next((b for b in timed if b >= batch), timed[-1])
    per_call = offline[str(nearest)]["median_ms"] / 1e3
    return math.ceil(clients / batch) * per_call


def measure(url, level, clients, expected_s, answers, tol, args, progress, what) -> dict:
    # NOTE: ~10 latencies: a window of a few 1.5 s batches miscounts by a whole batch at either end
    seconds = min(max(args.seconds, 10 * expected_s), args.max_seconds)
    progress(f"{what}: {clients} clients, {seconds:.0f} s")
    cpu, before = time.process_time(), batch_counts(url, level["model"])
    records, start, end = serve_load.run_level(
        serve_load.Level(url=url, clients=clients, seconds=seconds, max_requests=args.max_requests, **level)
    )
    out = serve_load.summarise(records, start, end, answers, *tol)
    out["client_cpu_s"] = time.process_time() - cpu
    after = batch_counts(url, level["model"])
    if before and after and after["calls"] > before["calls"]:
        calls = after["calls"] - before["calls"]
        out["batches"] = {
            "calls": calls,
            "mean_rows": (after["rows"] - before["rows"]) / calls,
            "mean_padded_rows": (after["padded"] - before["padded"]) / calls,
        }
    return out


def batch_counts(url: str, model: str) -> dict | None:
    """Calls, rows and padded rows so far, from the server's /metrics (None: a server without them)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://{url}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") != model:
                continue
            if sample.name == "paddle_xla_batch_rows_count":
                found["calls"] = sample.value
            elif sample.name == "paddle_xla_batch_rows_sum":
                found["rows"] = sample.value
            elif sample.name == "paddle_xla_batch_padded_rows_sum":
                found["padded"] = sample.value
    return found if len(found) == 3 else None


# ---- goals and report ------------------------------------------------------------------------------


def goals(result: dict, args) -> list[dict]:
    """Issue 16's three goals, for one model."""
    full, served = str(args.max_batch), result["served"]
    on, paddle = served["paddle_xla_batching"]["levels"], served["paddle_inference"]["levels"]
    offline = result["offline"]
    out = []
    if full in on and full in offline:
        got, want = on[full]["throughput_per_s"], 0.9 * offline[full]["rows_per_s"]
        out.append(_goal(f"throughput at {full} clients >= 90% of offline batch-{full}", got, want, got >= want, "/s"))
    for c in (c for c in map(str, args.concurrency) if c in on and c in offline and int(c) <= args.max_batch):
        bound = 2 * (offline[c]["median_ms"] + args.delay_us / 1e3)
        got = on[c]["p99_ms"]
        out.append(
            _goal(
                f"p99 at {c} clients <= 2 x (batch-{c} call + queue delay)",
                got,
                bound,
                got is not None and got <= bound,
                " ms",
            )
        )
    if full in on and full in paddle:
        got, want = on[full]["throughput_per_s"], 2 * paddle[full]["throughput_per_s"]
        out.append(_goal(f"throughput at {full} clients >= 2x Paddle Inference service", got, want, got >= want, "/s"))
    return out


def _goal(what, got, bound, ok, unit) -> dict:
    return {"goal": what, "measured": got, "bound": bound, "unit": unit.strip(), "pass": bool(ok)}


def markdown(report: dict) -> str:
    lines = [
        "| model | clients | paddle_xla batched /s | p50 / p99 ms | no batching /s | p50 / p99 ms | "
        "Paddle Inference /s | p50 / p99 ms | batched vs Paddle |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in report["models"].items():
        served = r["served"]
        for c in map(str, report["settings"]["concurrency"]):
            on, off, pd = (
                served[k]["levels"][c] for k in ("paddle_xla_batching", "paddle_xla_no_batching", "paddle_inference")
            )
            ratio = on["throughput_per_s"] / pd["throughput_per_s"] if pd["throughput_per_s"] else float("nan")
            lines.append(
                f"| {name} | {c} | {on['throughput_per_s']:.1f} | {_lat(on)} | {off['throughput_per_s']:.1f} | "
                f"{_lat(off)} | {pd['throughput_per_s']:.1f} | {_lat(pd)} | {ratio:.2f}x |"
            )
    lines += ["", "| model | offline batch | call ms | rows /s |", "|---|---|---|---|"]
    for name, r in report["models"].items():
        for b, t in r["offline"].items():
            lines.append(f"| {name} | {b} | {t['median_ms']:.1f} | {t['rows_per_s']:.1f} |")
    return "\n".join(lines)


def _lat(level: dict) -> str:
    p50, p99 = level["p50_ms"], level["p99_ms"]
    return "-" if p50 is None else f"{p50:.0f} / {p99:.0f}"


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--models", default="bert,resnet50", help="comma-separated: bert, resnet50, resnet50_bf16")
    p.add_argument("--concurrency", default=None, help="client counts (default 1,8,32,128; --quick 1,4)")
    p.add_argument("--max-batch", type=int, default=None, help="the server's --max-batch-size (default 32; --quick 4)")
    p.add_argument("--delay-us", type=int, default=2000, help="the server's --max-queue-delay-us")
    p.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="least time per level (default 10; --quick 2); a level runs for at least 10 x its expected latency",
    )
    p.add_argument("--max-seconds", type=float, default=None, help="most time per level (default 90; --quick 4)")
    p.add_argument("--max-requests", type=int, default=5000, help="most requests per level")
    p.add_argument(
        "--repeats", type=int, default=None, help="timed offline calls per batch size (default 5; --quick 2)"
    )
    p.add_argument("--pool", type=int, default=None, help="distinct inputs the clients cycle through (default 64)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed to export or time offline")
    p.add_argument("--quick", action="store_true", help="tiny models and short levels, a smoke run (< 60 s)")
    p.add_argument(
        "--out", default=None, help=f"JSON path (default {DEFAULT_OUT}; --quick: serve_quick.json beside it)"
    )
    args = p.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.max_batch = args.max_batch or (4 if args.quick else 32)
    args.concurrency = [int(c) for c in (args.concurrency or ("1,4" if args.quick else "1,8,32,128")).split(",")]
    args.seconds = args.seconds if args.seconds is not None else (2.0 if args.quick else 10.0)
    args.max_seconds = args.max_seconds or (4.0 if args.quick else 90.0)
    args.repeats = args.repeats or (2 if args.quick else 5)
    args.pool = args.pool or (8 if args.quick else 64)
    args.batches = sorted({1, *(c for c in args.concurrency if c < args.max_batch), args.max_batch})
    args.out = args.out or (DEFAULT_OUT.replace(".json", "_quick.json") if args.quick else DEFAULT_OUT)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="paddle_xla_serve_bench_")
    env = common.server_env()
    env.update(PYTHONUNBUFFERED="1", PADDLE_XLA_CACHE_DIR=os.path.join(workdir, "compile_cache"))

    def progress(message):
        print(f"[{time.monotonic() - started:6.0f} s] {message}", flush=True)

    try:
        models = {name: bench_model(name, args, workdir, env, progress) for name in args.models}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "benchmark": "serve",
        "command": "benchmarks/serve.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": common.machine_info(),
        "settings": {
            k: getattr(args, k)
            for k in (
                "concurrency",
                "max_batch",
                "delay_us",
                "seconds",
                "max_seconds",
                "max_requests",
                "repeats",
                "pool",
                "batches",
                "quick",
            )
        },
        "models": models,
    }
    for r in models.values():
        r["goals"] = goals(r, args)
    report["wall_s"] = time.monotonic() - started
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    print(markdown(report))
    for name, r in models.items():
        for g in r["goals"]:
            print(
                f"{'PASS' if g['pass'] else 'MISS'}  {name}: {g['goal']}: "
                f"{g['measured']:.1f} vs {g['bound']:.1f} {g['unit']}"
            )
    bad = [
        (name, key, c, lv)
        for name, r in models.items()
        for key, s in r["served"].items()
        for c, lv in s["levels"].items()
        if lv["wrong_answers"] or lv["failed"]
    ]
    for name, key, c, lv in bad:
        print(
            f"ERROR {name} {key} at {c} clients: {lv['wrong_answers']} wrong answers, {lv['failed']} failed "
            f"{lv['failures']}"
        )
    print(f"wrote {args.out} ({report['wall_s']:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
