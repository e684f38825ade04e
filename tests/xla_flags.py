"""The XLA flags test processes compile under, and the environment of the processes tests start.

Tests compile many small programs and run each a few times, so compiling is most of a test run's time
(74 % of tests/parallel/test_tensor.py's and tests/generation/test_generator.py's, by JAX's compile events).
Tests therefore compile with LLVM at -O0: the same HLO passes, fusion and buffer assignment (memory_analysis
gives the same bytes), 35-45 % less compile time for a Llama training step, slower code (ResNet-50's eval-parity
test: 7.6 s against 6.7). Users and the benchmarks compile at XLA's defaults.

NOTE: XLA:CPU's older elemental emitters (--xla_cpu_use_fusion_emitters=false) compile faster still, but
recompute shared operands: 20 chained `sin(x) + cos(x[::-1])` took 44 s to compile and tests/test_artifact.py's
100 never ended (17 GB), and ResNet-50's eval-parity test took 1923 s against 21. They are left out."""

from __future__ import annotations

import os

FAST_COMPILE = "--xla_backend_optimization_level=0"
SIXTEEN_DEVICES = "--xla_force_host_platform_device_count=16"


def child_env(devices: int | None = None, fast_compile: bool = True, **extra: str) -> dict:
    """os.environ for a process a test starts: this process's XLA flags but its virtual device count,
    with `devices` virtual CPU devices (None: XLA's one, as a server or a user's script has).
    fast_compile=False drops FAST_COMPILE, for a process that runs long enough to repay XLA's full
    optimization (the ResNet-18 example trains 28 s at XLA's defaults against 122 s at -O0)."""
    flags = [
        f
        for f in os.environ.get("XLA_FLAGS", "").split()
        if "device_count" not in f and (fast_compile or f not in FAST_COMPILE.split())
    ]
    if devices:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    return {**os.environ, "XLA_FLAGS": " ".join(flags), **extra}
