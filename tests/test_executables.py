"""The one executable cache every runnable uses: one compile per signature, even from many threads,
and a slow compile of one shape never holds up a call of another."""

import threading

import numpy as np

from paddle_xla.runtime.executables import ExecutableCache, signature


def _feeds(n):
    return {"x": np.zeros((n, 3), np.float32)}


def test_same_signature_compiles_once_across_threads():
    cache, calls, gate = ExecutableCache(), [], threading.Event()

    def compile_fn():
        calls.append(1)
        gate.wait(5)
        return "exe"

    threads = [threading.Thread(target=lambda: cache.get(_feeds(2), compile_fn, str)) for _ in range(4)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(10)
    assert len(calls) == 1 and len(cache) == 1
    assert list(cache.compile_seconds) == [signature(_feeds(2))]


def test_a_slow_compile_does_not_block_another_signature():
    cache, slow_started, release = ExecutableCache(), threading.Event(), threading.Event()

    def slow():
        slow_started.set()
        release.wait(10)
        return "slow"

    t = threading.Thread(target=lambda: cache.get(_feeds(2), slow, str))
    t.start()
    assert slow_started.wait(5)
    assert cache.get(_feeds(3), lambda: "fast", str) == "fast"  # NOTE: returns while b2 still compiles
    release.set()
    t.join(10)
    assert cache.get(_feeds(2), lambda: "again", str) == "slow"


def test_signature_tells_dtypes_and_names_apart():
    assert signature({"x": np.zeros(3, np.float32)}) != signature({"x": np.zeros(3, np.int32)})
    assert signature({"x": np.zeros(3)}) != signature({"y": np.zeros(3)})
