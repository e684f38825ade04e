"""JAX's persistent compilation cache, on by default, and a progress line for long compiles.

The cache comes on at paddle_xla's first compile (`ensure_compile_cache`, called where paddle_xla compiles:
ExecutableCache, StepRunner, the generation engines), not at `import paddle_xla`: importing leaves JAX's
configuration alone. A cache folder the user gave JAX themselves is kept.

Environment:
  PADDLE_XLA_CACHE=0        do not turn the cache on
  PADDLE_XLA_CACHE_DIR=DIR  where compiled executables are kept
                            (default $XDG_CACHE_HOME/paddle_xla/jax, else ~/.cache/paddle_xla/jax)
  PADDLE_XLA_PROGRESS=0     never print compile progress
  PADDLE_XLA_PROGRESS_DELAY=S  in a log (not a terminal), announce a compile once it has taken S seconds
                            (default 2)
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

import jax

# NOTE: JAX's default (1 s) skips most small and medium models on a fast CPU, yet each of them is
# recompiled in every new process. 0.1 s still keeps the many tiny eager-op programs out of the cache.
MIN_COMPILE_SECS = 0.1
PROGRESS_DELAY_SECS = 2.0
_OFF = ("0", "false", "off", "no")


def cache_dir() -> str | None:
    """The folder paddle_xla would use for compiled executables, or None when turned off."""
    if os.environ.get("PADDLE_XLA_CACHE", "1").strip().lower() in _OFF:
        return None
    explicit = os.environ.get("PADDLE_XLA_CACHE_DIR")
    if explicit:
        return os.path.expanduser(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "paddle_xla", "jax")


def enable_compile_cache(path: str | None = None, min_compile_secs: float = MIN_COMPILE_SECS) -> str | None:
    """Turn on JAX's persistent compilation cache; return the folder in use (None when off).

    A cache folder the user already gave JAX (JAX_COMPILATION_CACHE_DIR, jax.config) is kept."""
    current = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]  # NOTE: set on jax.config at run time
    if current and path is None:
        return current  # NOTE: the user's own JAX setting wins over our default
    path = path or cache_dir()
    if path is None:
        return None
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:  # NOTE: a read-only home must not stop a model from running, only from caching
        warnings.warn(f"paddle_xla: compile cache off, cannot create {path!r}: {e}", stacklevel=2)
        return None
    # NOTE: JAX reads the folder lazily at the first compile that wants the cache, so setting it after
    # earlier compiles still takes effect.
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_secs))
    return path


_ensured = False
_ensure_lock = threading.Lock()


def ensure_compile_cache() -> None:
    """Turn the cache on once per process, before paddle_xla's first compile (see enable_compile_cache).

    JAX opens the cache folder lazily, at the first compile that wants it, so a process that compiled
    something of its own before paddle_xla's first compile still caches paddle_xla's programs."""
    global _ensured
    if _ensured:
        return
    with _ensure_lock:
        if not _ensured:
            enable_compile_cache()
            _ensured = True


# ---- progress ---------------------------------------------------------------------------------
@contextmanager
def compile_progress(what: str, delay: float | None = None, stream: TextIO | None = None) -> Iterator[None]:
    """Show that `what` is compiling: a spinner with the elapsed time on a terminal, else one line
    once it has taken `delay` seconds (and one when it ends). Quick compiles print nothing in logs."""
    stream = stream or sys.stderr
    if os.environ.get("PADDLE_XLA_PROGRESS", "1").strip().lower() in _OFF:
        yield
        return
    if delay is None:
        delay = float(os.environ.get("PADDLE_XLA_PROGRESS_DELAY", PROGRESS_DELAY_SECS))
    shown = _Spinner(what, stream) if _is_tty(stream) else _LogLine(what, stream, delay)
    try:
        yield
    finally:
        shown.close()


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class _LogLine:
    """Non-terminal output (logs, CI): a line only for compiles that are slow enough to wonder about."""

    def __init__(self, what: str, stream: TextIO, delay: float):
        self.what, self.stream, self.start = what, stream, time.perf_counter()
        self.lock = threading.Lock()
        self.printed = False
        self.timer = threading.Timer(delay, self._announce)
        self.timer.daemon = True
        self.timer.start()

    def _announce(self):
        with self.lock:
            self.printed = True
            print(f"paddle_xla: compiling {self.what} ...", file=self.stream, flush=True)

    def close(self):
        self.timer.cancel()
        with self.lock:
            if self.printed:
                took = time.perf_counter() - self.start
                print(f"paddle_xla: compiled {self.what} in {took:.1f} s", file=self.stream, flush=True)


class _Spinner:
    """A transient rich spinner; it leaves nothing behind on the terminal."""

    def __init__(self, what: str, stream: TextIO):
        from rich.console import Console
        from rich.live import Live
        from rich.spinner import Spinner

        self.what, self.start = what, time.perf_counter()
        self.spinner = Spinner("dots")
        self.live = Live(self, console=Console(file=stream), transient=True, refresh_per_second=8)
        self.live.start()

    def __rich__(self):
        # NOTE: rich re-renders this object on each refresh, so the elapsed time stays current.
        self.spinner.update(text=f"Compiling {self.what} ... {time.perf_counter() - self.start:.1f} s")
        return self.spinner

    def close(self):
        self.live.stop()


@contextmanager
def compiles_seen() -> Iterator[list[str]]:
    """A list that collects one event name per JAX trace, lowering or XLA compile while the block runs.

    Tracing counts too: a compile served from the persistent cache still traces, so an empty list
    means nothing new was asked of the compiler."""
    seen: list[str] = []
    stop = watch_compiles(seen.append)
    try:
        yield seen
    finally:
        stop()


LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"  # NOTE: one event per new program, cached or not


def watch_compiles(on_event: Callable[[str], None]) -> Callable[[], None]:
    """Call on_event(name) for each JAX trace, lowering or XLA compile from now on (a program's lowering is
    LOWERED); returns the function that stops it."""

    def record(event: str, duration_secs: float, **kwargs: str | int) -> None:
        if not event.startswith("/jax/core/compile/"):
            return
        try:
            on_event(event)
        except Exception as e:  # NOTE: it runs inside JAX's compile: a watcher's failure must not fail the compile
            warnings.warn(f"paddle_xla: a compile watcher failed: {e!r}", stacklevel=2)

    jax.monitoring.register_event_duration_secs_listener(record)
    return lambda: jax.monitoring.unregister_event_duration_listener(record)
