"""The XLA flags test processes compile under, and the environment of the processes tests start.

Tests compile many small programs and run each a few times, so compiling is most of a test run's time
(74 % of tests/parallel/test_tensor.py's and tests/generation/test_generator.py's, measured with JAX's
compile events). Tests therefore compile with LLVM at -O0 and XLA:CPU's elemental emitters in place of its
fusion emitters: the same HLO passes, fusion decisions and buffer assignment (memory_analysis within 0.1 %),
about 60 % less compile time, slower code. Users and the benchmarks compile at XLA's defaults."""
from __future__ import annotations

import os

FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
SIXTEEN_DEVICES = "--xla_force_host_platform_device_count=16"


def child_env(devices: int | None = None, **extra: str) -> dict:
    """os.environ for a process a test starts: this process's XLA flags but its virtual device count,
    with `devices` virtual CPU devices (None: XLA's one, as a server or a user's script has)."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
    if devices:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    return {**os.environ, "XLA_FLAGS": " ".join(flags), **extra}
