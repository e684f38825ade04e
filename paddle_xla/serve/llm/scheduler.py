"""The scheduler of one served language model: a thread that runs its ContinuousEngine.

Between decode chunks it drops what was cancelled or ran past its deadline (freeing the row at once),
and inserts waiting requests into free rows: while streams are running, one insert per chunk, so that a
prefill holds them up for one prefill at most; with none running, as many as there are free rows. The
tokens of each chunk go to their requests' asyncio queues on the server's event loop. Paddle-free.

A request's events on its queue: ("token", id) ..., then ("end", reason) with reason "stop" (EOS),
"length" (max_tokens), "cancelled", "timeout" or "error: <message>".
"""
from __future__ import annotations

import asyncio
import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from ...generation.continuous import ContinuousEngine, Request
from ...generation.slots import NO_TOKEN
from ..errors import unavailable


@dataclass(eq=False)
class Stream:
    """One request's life: what it asked for, and where its tokens go."""
    request: Request
    loop: asyncio.AbstractEventLoop
    deadline: float | None = None          # time.monotonic() past which it ends with "timeout"
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: bool = False
    row: int | None = None
    made: int = 0
    last: int | None = None

    def send(self, *event) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, event)


class Scheduler:
    def __init__(self, name: str, engine: ContinuousEngine, max_waiting: int, log: Callable[[str], None],
                 on_failure: Callable[[str], None], gauges=None):
        self.name, self.engine, self.max_waiting, self.log, self.on_failure = name, engine, max_waiting, log, on_failure
        self.gauges = gauges            # (busy rows, waiting) prometheus gauges for this model, or None
        self.ready = False
        self._cond = threading.Condition()
        self._waiting: collections.deque[Stream] = collections.deque()
        self._running: dict[int, Stream] = {}
        self._stopping = self._stopped = False
        self._thread = threading.Thread(target=self._main, name=f"paddle-xla-llm {name}", daemon=True)

    # ---- the event loop's side ----
    def start(self) -> None:
        self._thread.start()

    def submit(self, stream: Stream) -> None:
        """Queue a checked request; 503 when the waiting queue is full or the server is draining."""
        with self._cond:
            if self._stopping:
                raise unavailable("The server is shutting down; send the request to another replica.")
            if len(self._waiting) >= self.max_waiting:
                raise unavailable(f"Model {self.name!r} has {len(self._waiting)} requests waiting for a slot, its "
                                  "limit (--max-queue-size); retry later.")
            self._waiting.append(stream)
            self._cond.notify()

    def cancel(self, stream: Stream) -> None:
        """The client is gone (or has what it wanted): its row is freed before the next chunk."""
        with self._cond:
            stream.cancelled = True
            self._cond.notify()

    @property
    def busy_rows(self) -> int:
        return int(self.engine.busy.sum())

    def drain(self) -> None:
        """Take no new requests; those running and waiting still finish."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def stop(self, timeout_s: float) -> None:
        """Let running and waiting requests finish for up to `timeout_s`, then end the thread."""
        self.drain()
        self._thread.join(timeout_s)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(1.0)

    # ---- the thread ----
    def _main(self) -> None:
        try:
            self.engine.warm_up()
        except Exception as e:   # NOTE: a model that cannot run stops the server (server.py)
            self.on_failure(f"{self.name}: warm-up failed: {type(e).__name__}: {e}")
            return
        self.ready = True
        try:
            while self._next():
                pass
        except Exception as e:
            self.on_failure(f"{self.name}: the decode loop failed: {type(e).__name__}: {e}")
            for stream in list(self._running.values()) + list(self._waiting):
                stream.send("end", f"error: {type(e).__name__}: {e}")

    def _next(self) -> bool:
        """One round: settle cancellations and deadlines, admit, run one chunk. False when done."""
        with self._cond:
            while not self._waiting and not self._running and not self._stopped:
                if self._stopping:
                    return False
                self._cond.wait(0.5)
            if self._stopped:
                return False
            self._settle(time.monotonic())
            admit = self._admissible()
        for stream in admit:
            self._insert(stream)
        self._gauge()
        if self._running:
            self._distribute(self.engine.run_chunk())
            self._gauge()
        return True

    def _settle(self, now: float) -> None:
        for row, stream in list(self._running.items()):
            reason = _dropped(stream, now)
            if reason:
                self.engine.free(row)
                del self._running[row]
                stream.send("end", reason)
        for stream in [s for s in self._waiting if _dropped(s, now)]:
            self._waiting.remove(stream)
            stream.send("end", _dropped(stream, now))

    def _admissible(self) -> list[Stream]:
        free = self.engine.geometry.max_batch_size - len(self._running)
        n = min(free, 1 if self._running else free, len(self._waiting))
        return [self._waiting.popleft() for _ in range(n)]

    def _insert(self, stream: Stream) -> None:
        row = self.engine.free_row()
        try:
            token, goes_on = self.engine.insert(row, stream.request)
        except Exception as e:   # NOTE: checked at submit; anything else is this request's error, not the server's
            stream.send("end", f"error: {type(e).__name__}: {e}")
            return
        self._emit(stream, token)
        if goes_on:
            stream.row = row
            self._running[row] = stream
        else:
            stream.send("end", self._reason(stream))

    def _distribute(self, out) -> None:
        for row, stream in list(self._running.items()):
            for token in out[row]:
                if token != NO_TOKEN:
                    self._emit(stream, int(token))
            if not self.engine.busy[row]:
                del self._running[row]
                stream.send("end", self._reason(stream))

    def _emit(self, stream: Stream, token: int) -> None:
        stream.made += 1
        stream.last = token
        stream.send("token", token)

    def _reason(self, stream: Stream) -> str:
        return "stop" if stream.last in self.engine.eos else "length"

    def _gauge(self) -> None:
        if self.gauges is not None:
            busy, waiting = self.gauges
            busy.set(self.busy_rows)
            waiting.set(len(self._waiting))


def _dropped(stream: Stream, now: float) -> str | None:
    if stream.cancelled:
        return "cancelled"
    if stream.deadline is not None and now > stream.deadline:
        return "timeout"
    return None
