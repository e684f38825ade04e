"""One compiled executable per input signature, shared by every runnable (CompiledModel, Artifact,
TrainArtifact): compiled on first use, with the progress line for long compiles, and under a lock
per signature, so that two server threads asking for the same new shape compile it once while
other shapes run on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from .compile_cache import compile_progress, ensure_compile_cache


def signature(feeds: Mapping[str, Any]) -> tuple:
    """What an executable is specialised to: each input's name, shape and dtype."""
    return tuple((k, tuple(v.shape), str(v.dtype)) for k, v in sorted(feeds.items()))


def shapes_text(sig: tuple) -> dict[str, list[int]]:
    return {k: list(s) for k, s, _ in sig}


class ExecutableCache:
    """sig -> executable. `get(feeds, compile_fn, what)` compiles with `compile_fn()` on a miss."""

    def __init__(self):
        self._executables: dict[tuple, Any] = {}
        self._locks: dict[tuple, threading.Lock] = {}
        self._guard = threading.Lock()
        self.compile_seconds: dict[tuple, float] = {}

    def get(self, feeds: Mapping[str, Any], compile_fn: Callable[[], Any], what: Callable[[tuple], str]):
        """The executable for these feeds' signature; `what(sig)` names it in the progress line."""
        sig = signature(feeds)
        exe = self._executables.get(sig)
        if exe is not None:
            return exe
        with self._guard:
            lock = self._locks.setdefault(sig, threading.Lock())
        with lock:
            exe = self._executables.get(sig)
            if exe is None:
                ensure_compile_cache()
                start = time.perf_counter()
                with compile_progress(what(sig)):
                    exe = compile_fn()
                self.compile_seconds[sig] = time.perf_counter() - start
                self._executables[sig] = exe
        return exe

    def values(self):
        return list(self._executables.values())

    def __len__(self) -> int:
        return len(self._executables)
