"""Shared pieces of the benchmarks: timing, machine facts, the matmul peak, FLOP counting, workers.

Nothing here imports paddle at module level: the parent process of a benchmark stays light, and each
measured configuration runs in a fresh worker process of its own (see `run_worker`)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import select
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# NOTE: the peak and BERT FLOPs live in the package, so `paddle-xla bench` and these scripts agree.
from paddle_xla.planner.perf import bert_flops, best_rate, matmul_peak, matmul_rate  # noqa: F401

# ---- timing ------------------------------------------------------------------------------------


def time_calls(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> dict[str, Any]:
    """Call `fn` `warmup` times untimed, then `repeats` times timed; latency statistics in ms.

    `fn` must block until its result is ready (block_until_ready, .numpy(), copy_to_cpu)."""
    for _ in range(warmup):
        fn()
    samples, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.process_time() - start_cpu) * 1e3)
    return latency_stats(samples, cpu)


def latency_stats(samples_ms: Sequence[float], cpu_ms: Sequence[float] | None = None) -> dict[str, Any]:
    out = {
        "median_ms": statistics.median(samples_ms),
        "min_ms": min(samples_ms),
        "mean_ms": statistics.fmean(samples_ms),
        "max_ms": max(samples_ms),
        "repeats": len(samples_ms),
        "samples_ms": [round(s, 3) for s in samples_ms],
    }
    if cpu_ms:
        # NOTE: CPU seconds of all the process's threads per call (spin-waiting included): on a shared
        # machine it says how much work a call took even when the wall clock was stretched by others.
        out["median_cpu_ms"] = statistics.median(cpu_ms)
    return out


# ---- the machine -------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags(wanted=("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")) -> list[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [w for w in wanted if w in have]
    except OSError:
        pass
    return []


def nproc() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for pkg in ("paddle_xla", "jax", "jaxlib", "paddlepaddle", "numpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def machine_info() -> dict[str, Any]:
    mem_gib = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            mem_gib = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cpu_model": cpu_model(),
        "nproc": nproc(),
        "cpu_flags": cpu_flags(),
        "memory_gib": mem_gib,
        "platform": platform.platform(),
        "versions": versions(),
        "env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "XLA_FLAGS") if k in os.environ},
    }


# ---- the matmul peak ---------------------------------------------------------------------------


def paddle_matmul_rate(sizes: Sequence[int] = (2048, 4096), repeats: int = 5) -> dict[str, Any]:
    """Native Paddle's own f32 matmul (eager paddle.matmul, its CPU BLAS), for comparison with XLA's."""
    import paddle

    rates = {}
    for n in sizes:
        a, b = paddle.randn([n, n]), paddle.randn([n, n])
        rates[n] = best_rate(lambda a=a, b=b: paddle.matmul(a, b), 2 * n**3, repeats)
    return {
        "fp32_gflops": round(max(w for w, _ in rates.values()), 2),
        "fp32_gflops_per_cpu_second": round(max(c for _, c in rates.values()), 2),
        "fp32_by_size": {str(n): round(w, 2) for n, (w, _) in rates.items()},
        "how": "eager paddle.matmul with OMP/MKL threads = nproc, best of `repeats`",
    }


# ---- FLOPs -------------------------------------------------------------------------------------

# NOTE: the figure usually quoted for ResNet-50 ("3.8-4.1 GFLOPs", He et al. 2016 Table 1; torchvision
# lists 4.09) counts multiply-adds. A multiply-add is 2 FLOPs, and the matmul peak counts 2 n^3, so the
# comparable figure is 2 x 4.09e9 per 224x224 image.
RESNET50_MACS_PER_224_IMAGE = 4.09e9


def resnet50_flops(batch: int, size: int = 224) -> float:
    """2 x the standard multiply-add count, scaled by image area (a fallback when the Graph cannot be traced)."""
    return 2 * RESNET50_MACS_PER_224_IMAGE * batch * (size / 224) ** 2


def jaxpr_flops(closed_jaxpr) -> dict[str, float]:
    """FLOPs of the matmuls and convolutions in a jaxpr (2 per multiply-add), by primitive."""
    counts: dict[str, float] = {}
    _count(closed_jaxpr.jaxpr, 1.0, counts)
    return counts


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def _count(jaxpr, mult: float, counts: dict[str, float]) -> None:
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            lhs, rhs = (v.aval for v in eqn.invars[:2])
            (_, rc), (_, rb) = eqn.params["dimension_numbers"]
            rhs_free = [d for i, d in enumerate(rhs.shape) if i not in rc and i not in rb]
            flops = 2 * _prod(lhs.shape) * _prod(rhs_free)
        elif name == "conv_general_dilated":
            rhs = eqn.invars[1].aval
            out = eqn.outvars[0].aval
            spec = eqn.params["dimension_numbers"].rhs_spec  # (out feature, in feature, *spatial)
            flops = 2 * _prod(out.shape) * rhs.shape[spec[1]] * _prod(rhs.shape[d] for d in spec[2:])
        else:
            flops = 0
        if flops:
            counts[name] = counts.get(name, 0.0) + mult * flops
        inner = mult * (eqn.params.get("length", 1) if name == "scan" else 1)
        for sub in _subjaxprs(eqn.params):
            _count(sub, inner, counts)


def _subjaxprs(params: Mapping[str, Any]):
    for v in params.values():
        for item in v if isinstance(v, (list, tuple)) else (v,):
            if hasattr(item, "jaxpr") and hasattr(item, "consts"):  # ClosedJaxpr
                yield item.jaxpr
            elif hasattr(item, "eqns"):  # Jaxpr
                yield item


# ---- workers -----------------------------------------------------------------------------------


def server_env() -> dict[str, str]:
    """os.environ for a server subprocess: the caller's XLA flags reach it, a virtual CPU device count does
    not (a server runs on one device; the tests set 16)."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
    return {**os.environ, "XLA_FLAGS": " ".join(flags)}


def paddle_env(kept_heap: bool) -> dict[str, str]:
    """Environment for a Paddle worker: glibc's default malloc, or paddle_xla's malloc policy
    (host_heap.py) from the process's start, so that Paddle is not compared at a disadvantage. A
    Paddle worker imports paddle_xla's helpers too, which would otherwise set the policy late."""
    from paddle_xla.runtime.host_heap import GLIBC_TUNABLES

    return {"PADDLE_XLA_KEEP_HEAP": "0", **({"GLIBC_TUNABLES": GLIBC_TUNABLES} if kept_heap else {})}


def busy_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (all processes, from /proc/stat)."""
    try:
        with open("/proc/stat", encoding="utf-8") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


@dataclass
class WorkerResult:
    ok: bool
    data: dict[str, Any]
    seconds: float
    log_tail: str
    # NOTE: other tenants' CPU use during the worker: the machine's busy CPU time less our worker's,
    # as a fraction of all cores. Above ~0.1 the latencies measured are not the machine's own.
    foreign_load: float | None = None
    load_average: tuple[float, float, float] | None = None


def run_worker(
    script: str, job: Mapping[str, Any], *, env: Mapping[str, str | None], timeout: float, workdir: str, tag: str
) -> WorkerResult:
    """Run `script --worker job.json` in a fresh Python process with `env` applied (None removes a
    variable), and read back the JSON it writes. A crash or timeout comes back as ok=False with the log."""
    job_path = os.path.join(workdir, f"{tag}.job.json")
    out_path = os.path.join(workdir, f"{tag}.out.json")
    log_path = os.path.join(workdir, f"{tag}.log")
    with open(job_path, "w", encoding="utf-8") as f:
        json.dump({**job, "out": out_path}, f)
    full_env = dict(os.environ)
    for k, v in env.items():
        if v is None:
            full_env.pop(k, None)
        else:
            full_env[k] = v
    load_average = os.getloadavg()
    busy0, own0 = busy_cpu_seconds(), _children_cpu_seconds()
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            proc = subprocess.run(
                [sys.executable, script, "--worker", job_path],
                env=full_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    seconds = time.perf_counter() - start
    busy1, own1 = busy_cpu_seconds(), _children_cpu_seconds()
    foreign = None
    if busy0 is not None and busy1 is not None:
        foreign = max(0.0, ((busy1 - busy0) - (own1 - own0)) / (seconds * nproc()))
    with open(log_path, encoding="utf-8", errors="replace") as f:
        tail = "".join(
            line for line in f.readlines()[-30:] if "UserWarning" not in line and "warnings.warn" not in line
        )
    if rc == 0 and os.path.exists(out_path):
        with open(out_path, encoding="utf-8") as f:
            return WorkerResult(True, json.load(f), seconds, tail, foreign, load_average)
    return WorkerResult(
        False, {"error": f"worker exited with {rc}", "log_tail": tail[-3000:]}, seconds, tail, foreign, load_average
    )


def _children_cpu_seconds() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# ---- long-lived workers, driven turn by turn ----------------------------------------------------
# NOTE: on a machine shared with other work, load comes and goes; configurations timed one after
# another would each meet a different load. Live workers that take turns call by call meet the same.

PREFIX = "@@bench "


class WorkerError(RuntimeError):
    pass


class Worker:
    """A fresh Python process running `script --worker job.json`, answering one JSON line per request.

    Requests: "setup KEY" (build, compile, first call), "warmup KEY", "time KEY" (one timed call),
    "finish KEY" (save the outputs), "quit"; a worker may serve several configurations (keys). `env` is applied
    on top of this process's environment (None removes a variable)."""

    def __init__(self, script: str, job: Mapping[str, Any], *, env: Mapping[str, str | None], workdir: str, tag: str):
        self.tag = tag
        self.log_path = os.path.join(workdir, f"{tag}.log")
        job_path = os.path.join(workdir, f"{tag}.job.json")
        with open(job_path, "w", encoding="utf-8") as f:
            json.dump(job, f)
        full_env = dict(os.environ)
        for k, v in env.items():
            if v is None:
                full_env.pop(k, None)
            else:
                full_env[k] = v
        self._log = open(self.log_path, "w", encoding="utf-8")  # noqa: SIM115 (open while the worker lives; close() closes it)
        self.proc = subprocess.Popen(
            [sys.executable, script, "--worker", job_path],
            env=full_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        self._buf = b""

    def request(self, cmd: str | None, timeout: float) -> dict[str, Any]:
        """Send `cmd` (None: just wait for the next reply) and return the worker's JSON reply."""
        if cmd is not None:
            try:
                self.proc.stdin.write((cmd + "\n").encode())
                self.proc.stdin.flush()
            except BrokenPipeError:
                raise WorkerError(f"{self.tag}: worker has exited ({self.proc.poll()})") from None
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                text = line.decode(errors="replace")
                if text.startswith(PREFIX):
                    return json.loads(text[len(PREFIX) :])
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise WorkerError(f"{self.tag}: no answer to {cmd!r} within {timeout:.0f} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise WorkerError(f"{self.tag}: worker exited ({self.proc.wait()}) during {cmd!r}")
            self._buf += chunk

    def cpu_seconds(self) -> float:
        """CPU time of all the worker's threads so far."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return 0.0

    def log_tail(self, lines: int = 30) -> str:
        self._log.flush()
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            keep = [ln for ln in f.readlines() if "UserWarning" not in ln and "warnings.warn" not in ln]
        return "".join(keep[-lines:])[-3000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(WorkerError):
                self.request("quit", 30)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


BURST_CALLS, BURST_WARM_S = 10, 1.0


def serve(
    setups: Mapping[str, Callable[[], tuple[dict[str, Any], Callable[[], Any] | None, Callable[[], Any] | None]]],
) -> None:
    """The worker's side of `Worker`. `setups[key]()` returns (info, call, outputs) for one configuration;
    requests are "setup KEY", "warmup KEY", "time KEY", "burst KEY", "finish KEY" and "quit"."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # NOTE: stray prints from Paddle or JAX go to the log, not into the replies

    def reply(obj):
        out.write(PREFIX + json.dumps(obj) + "\n")
        out.flush()

    reply({"ready": True})
    calls: dict[str, Callable[[], Any]] = {}
    outputs: dict[str, Callable[[], Any]] = {}
    for line in sys.stdin:
        cmd, _, key = line.strip().partition(" ")
        try:
            if cmd == "setup":
                info, calls[key], outputs[key] = setups[key]()
                reply(info)
            elif cmd == "warmup":
                calls[key]()
                reply({})
            elif cmd == "time":
                call = calls[key]
                start, start_cpu = time.perf_counter(), time.process_time()
                call()
                reply(
                    {"wall_ms": (time.perf_counter() - start) * 1e3, "cpu_ms": (time.process_time() - start_cpu) * 1e3}
                )
            elif cmd == "burst":
                # NOTE: back to back, no pause: what a busy server's calls see (see "back to back" in
                # benchmarks/README.md: after an idle gap this VM slows XLA's calls, not Paddle's)
                warm_until = time.perf_counter() + BURST_WARM_S  # NOTE: 2 calls left both frameworks still speeding up
                while time.perf_counter() < warm_until:
                    calls[key]()
                reply(time_calls(calls[key], BURST_CALLS, warmup=0))
            elif cmd == "finish":
                reply({"outputs": outputs[key]()})
            elif cmd == "quit":
                reply({})
                return
            else:
                reply({"status": "error", "message": f"unknown request {cmd!r}"})
        except Exception as e:  # NOTE: report, and stay up for the parent to decide
            reply(
                {"status": "error", "message": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
            )
