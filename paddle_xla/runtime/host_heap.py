"""Keep freed host memory for reuse, so that XLA:CPU's per-call buffers do not page-fault on every call.

XLA:CPU allocates each call's temporaries (every intermediate activation, packed into one block:
50 MB for MobileNetV3-large at batch 8) with malloc and frees them when the call ends. glibc hands a
block that large back to the kernel at once (mmap/munmap, or by trimming a thread's heap), so the
next call touches fresh pages and takes one page fault per 4 KiB: 12,800 faults, about 2 us each on
this VM, 15-25 ms of a 35 ms call. Measured on 2 cores (in-process, median of 15 back-to-back calls):
MobileNetV3-large b8 38.5 -> 20.5 ms, ResNet-50 b8 211 -> 193 ms; a MobileNetV3-large b32 training
step (4 GB of temporaries, 1.1 million faults) 2225 -> 1160 ms. Paddle Inference's predictor pays the
same toll under glibc's defaults (MobileNetV3-large b8 26.0 -> 16.7 ms with these settings given as
GLIBC_TUNABLES); benchmarks/inference.py times Paddle both ways.

The policy, set through mallopt: one malloc arena for all threads (XLA's worker threads would
otherwise get heaps of their own, and glibc deletes a thread heap once it is empty), no mmap for large
blocks, and no trimming of the heap's top. Freed memory then stays in the process and is reused;
the cost is that the process's resident memory stays at its high-water mark, and that the heap
grows by one call's temporaries several times before freed blocks are always reusable (a 64 MB
temporary with 16 virtual devices, 150 calls: 8-11 growths, most in the first calls, the last as
late as call 110; 735-927 MB resident at the end, against 476 MB with one device).

Process-wide, so it is applied once, when paddle_xla is imported (before XLA starts its threads: a
thread that already has an arena keeps it), and only where programs will run on XLA:CPU. On a GPU or
TPU host the weights pass through host memory once on their way to the device, and holding on to
them would be a waste. PADDLE_XLA_KEEP_HEAP=0 leaves glibc's defaults alone. Paddle-free."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import platform

_OFF = ("0", "false", "off", "no")
# NOTE: glibc's mallopt parameter numbers (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
# NOTE: mallopt takes an int and glibc stores it as a size_t, so -1 is "never". 2**31 - 1 was not: a
# training step's temporaries (4 GB for MobileNetV3-large b32) left more than 2 GiB free at the heap's
# top, glibc trimmed it, and every step faulted 1.1 million pages back in.
_NEVER_TRIM = -1
_ACCELERATOR_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "jax_rocm7_plugin", "libtpu")
# NOTE: the same policy for a process started by someone else (benchmarks give it to Paddle's workers)
GLIBC_TUNABLES = f"glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold={2**64 - 1}"

_applied: bool | None = None


def runs_on_cpu() -> bool:
    """Whether this process's programs will run on XLA:CPU, decided without starting a JAX backend."""
    platforms = os.environ.get("JAX_PLATFORMS", "").strip().lower()
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    return not any(importlib.util.find_spec(p) is not None for p in _ACCELERATOR_PLUGINS)


def keep_freed_memory() -> bool:
    """Apply the policy once per process; True when it is in force."""
    global _applied
    if _applied is None:
        _applied = _wanted() and _mallopt_all()
    return _applied


def _wanted() -> bool:
    if os.environ.get("PADDLE_XLA_KEEP_HEAP", "1").strip().lower() in _OFF:
        return False
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc" and runs_on_cpu()


def _mallopt_all() -> bool:
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # NOTE: mallopt answers 1 on success
    return all(
        mallopt(param, value) == 1
        for param, value in ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, _NEVER_TRIM))
    )
