"""paddle_xla keeps freed host memory for reuse (host_heap.py): XLA:CPU's per-call temporaries then
stop page-faulting on every call. Checked by counting the page faults of warm calls, in a fresh
process each (malloc's policy is per process and must be set before XLA's threads start)."""

import os
import platform
import subprocess
import sys

import pytest

from paddle_xla.runtime import host_heap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# NOTE: a 64 MB temporary, above the largest block glibc ever serves from the heap by default (32 MB)
CALLS = """
import resource, sys
import paddle_xla
from paddle_xla.runtime import host_heap
import jax, jax.numpy as jnp
x = jnp.ones((4096, 1024), jnp.float32)
f = jax.jit(lambda x: jnp.tanh(jnp.concatenate([x, x, x, x], 1) * 2.0).sum(0))
# NOTE: a freed block is not always reusable at once: the heap grows by one call's temporaries some
# 8-11 times in all (measured over 150 calls), most often early, the last as late as call 110
for _ in range(5):
    jax.block_until_ready(f(x))
start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(60):
    jax.block_until_ready(f(x))
print(host_heap.keep_freed_memory(), (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start) // 60)
"""

glibc_only = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="the policy is glibc's mallopt"
)


def faults_per_call(**env) -> tuple[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", CALLS],
        cwd=ROOT,
        env={**os.environ, "JAX_PLATFORMS": "cpu", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    kept, faults = done.stdout.split()[-2:]
    return kept, int(faults)


@glibc_only
def test_warm_calls_reuse_their_temporaries_instead_of_faulting_them_in():
    kept, faults = faults_per_call()
    # NOTE: 64 MB of fresh pages is ~16,000 faults; the heap's few late growths average under a quarter of that
    assert kept == "True" and faults < 4096, faults


@glibc_only
def test_the_opt_out_leaves_glibc_alone_and_the_faults_come_back():
    kept, faults = faults_per_call(PADDLE_XLA_KEEP_HEAP="0")
    assert kept == "False" and faults > 8000, faults


def test_an_accelerator_platform_keeps_glibcs_defaults(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
    assert not host_heap.runs_on_cpu()
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert host_heap.runs_on_cpu()
