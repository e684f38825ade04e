"""The scheduler of one served language model: a thread that runs its ContinuousEngine.

Between decode chunks it drops what was cancelled or ran past its deadline (freeing the row at once),
and prefills waiting requests into free rows. While streams are running, it prefills about one
prefill_chunk of prompt tokens per decode chunk: several short prompts whole, or one step of a longer
prompt (prefill_chunk tokens at a time, over as many rounds as it takes), so that new requests hold the
running streams up for about one chunk; the last prefill step runs beside the decode step as one program
where the engine can (engine.step_and_fill). With none running, it prefills as many as there are free
rows, whole. The tokens of each chunk go to their
requests' asyncio queues on the server's event loop. Paddle-free.

A request's events on its queue: ("prompt_scores", TokenScores [T]) first where it asked for its prompt's
log-probabilities (engine.score_prompt: one prompt's whole pass per round, between decode chunks, so it
holds running streams up for a prompt's prefill, not one chunk's), ("token", id, scores)
..., then ("end", reason) with reason "stop" (EOS), "length" (max_tokens), "cancelled", "timeout" or
"error: <message>". scores: the token's TokenScores on the host (generation/row_logits.py) where the request
asked for logprobs, else None.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...generation.continuous import ContinuousEngine, Request
from ...generation.slots import NO_TOKEN
from ..queue_thread import QueueThread


@dataclass(eq=False)
class Stream:
    """One request's life: what it asked for, and where its tokens go."""

    request: Request
    loop: asyncio.AbstractEventLoop
    deadline: float | None = None  # time.monotonic() past which it ends with "timeout"
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: bool = False
    row: int | None = None
    made: int = 0
    hit: int = 0  # prompt tokens the prefix cache held
    last: int | None = None
    submitted: float = field(default_factory=time.monotonic)
    last_at: float | None = None  # when its previous tokens went out
    score_prompt: bool = False  # NOTE: its prompt's log-probabilities first (echo with logprobs)

    def send(self, *event) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, event)


class Scheduler(QueueThread):
    """Drained (QueueThread.drain), it takes no new requests; those running and waiting still finish."""

    def __init__(
        self,
        name: str,
        engine: ContinuousEngine,
        max_waiting: int,
        log: Callable[[str], None],
        on_failure: Callable[[str], None],
        metrics=None,
        max_prefill_tokens: int = 0,
    ):
        super().__init__()
        self.max_prefill_tokens = max_prefill_tokens  # NOTE: 0: the engine's prefill chunk (_prefill_budget)
        self.name, self.engine, self.max_waiting, self.log, self.on_failure = name, engine, max_waiting, log, on_failure
        self.metrics = metrics  # serve/metrics.py's LlmMetrics for this model, or None
        self.spec_metrics: Any = None  # NOTE: its serve/metrics.py SpecMetrics, where the engine speculates
        self.ready = False
        self._waiting: collections.deque[Stream] = collections.deque()
        self._scoring: collections.deque[Stream] = collections.deque()  # NOTE: prompts to score before they wait
        self._running: dict[int, Stream] = {}
        self._filling: dict[int, Stream] = {}  # rows whose prompt is going in, oldest first
        self._stopped = False
        self._thread = threading.Thread(target=self._main, name=f"paddle-xla-llm {name}", daemon=True)

    # ---- the event loop's side ----
    def start(self) -> None:
        self._thread.start()

    def submit(self, stream: Stream) -> None:
        """Queue a checked request; 503 when the waiting queue is full or the server is draining."""
        with self._cond:
            self._admit(self.name, len(self._waiting) + len(self._scoring), self.max_waiting, "waiting for a slot")
            (self._scoring if stream.score_prompt else self._waiting).append(stream)
            self._cond.notify()

    def cancel(self, stream: Stream) -> None:
        """The client is gone (or has what it wanted): its row is freed before the next chunk."""
        with self._cond:
            stream.cancelled = True
            self._cond.notify()

    @property
    def busy_rows(self) -> int:
        return int(self.engine.busy.sum())

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
        except Exception as e:  # NOTE: a model that cannot run stops the server (server.py)
            self.on_failure(f"{self.name}: warm-up failed: {type(e).__name__}: {e}")
            return
        self.ready = True
        try:
            while self._next():
                pass
        except Exception as e:
            self.on_failure(f"{self.name}: the decode loop failed: {type(e).__name__}: {e}")
            streams = [*self._running.values(), *self._filling.values(), *self._waiting, *self._scoring]
            for stream in streams:
                stream.send("end", f"error: {type(e).__name__}: {e}")

    def _next(self) -> bool:
        """One round: settle cancellations and deadlines, admit, run one chunk. False when done."""
        with self._cond:
            while not (self._waiting or self._scoring or self._running or self._filling or self._stopped):
                if self._stopping:
                    return False
                self._cond.wait(0.5)
            if self._stopped:
                return False
            self._settle(time.monotonic())
            # NOTE: begun under the lock, one by one: each reserves its row (and cache blocks) before the next
            # is asked whether it fits (begin is host bookkeeping; the prefill runs in fill)
            g, budget = self.engine.geometry, self._prefill_budget()
            for _ in range(self._admissible()):
                request = self._waiting[0].request
                first = g.bucket(len(request.ids)) or g.prefill_chunk  # NOTE: its first prefill step's width
                if not self.engine.fits_now(request) or (self._filling and first > budget):
                    break  # NOTE: first come, first served: it waits for blocks, and those behind it too
                budget -= first
                self._begin(self._waiting.popleft())
            scoring = self._scoring.popleft() if self._scoring else None
        if scoring is not None:
            self._score(scoring)
        if not self._running:
            for row in list(self._filling):
                while row in self._filling:
                    self._fill(row)
        self._gauge()
        if self._running:
            start = time.monotonic()
            if self._filling:
                # NOTE: the prompts begun this round one prefill step each, the last beside the decode chunk (one
                # program where the engine can)
                *alone, last = self._filling
                for row in alone:
                    self._fill(row)
                out = self._fill(last, beside=True)
            else:
                out = self.engine.run_chunk()
            self._observe("decode", time.monotonic() - start)
            bucket = getattr(self.engine, "last_bucket", None)
            if bucket is not None and self.metrics is not None:
                self.metrics.bucket_rows.observe(bucket[0])
                self.metrics.bucket_blocks.observe(bucket[1])
            self._distribute(out)
            self._gauge()
        return True

    def _settle(self, now: float) -> None:
        for rows in (self._running, self._filling):
            for row, stream in list(rows.items()):
                reason = _dropped(stream, now)
                if reason:
                    self.engine.free(row)
                    del rows[row]
                    stream.send("end", reason)
        for queue in (self._waiting, self._scoring):
            for stream in [s for s in queue if _dropped(s, now)]:
                queue.remove(stream)
                stream.send("end", _dropped(stream, now))

    def _admissible(self) -> int:
        """How many waiting requests may begin now, rows allowing (the engine also asks for their blocks, and
        _prefill_budget bounds their prompts)."""
        free = len(self.engine.busy) - len(self._running) - len(self._filling)
        # NOTE: with streams running, new prompts go in only once the last one is in
        return 0 if self._running and self._filling else min(free, len(self._waiting))

    def _prefill_budget(self) -> int:
        """Prompt tokens (their first prefill steps' widths) that may go in beside one decode chunk while streams
        run: max_prefill_tokens, by default one prefill chunk's worth, so short prompts go in several at once and
        new requests delay the running streams by about one prefill chunk (unbounded when nothing runs: the
        prompts all go in now)."""
        if not self._running:
            return 1 << 62
        return self.max_prefill_tokens or self.engine.geometry.buckets[-1]  # NOTE: prefill_chunk where chunked

    def _score(self, stream: Stream) -> None:
        """Its prompt's log-probabilities out (one scoring pass, beside whatever runs), then it waits for a row,
        first in line; a request for no new tokens ends there."""
        start = time.monotonic()
        try:
            scores = self.engine.score_prompt(stream.request.ids)
        except Exception as e:  # NOTE: this request's failure, not the loop's
            stream.send("end", f"error: {type(e).__name__}: {e}")
            return
        finally:
            self._observe("prefill", time.monotonic() - start)
        stream.send("prompt_scores", scores)
        if stream.request.max_new_tokens == 0:
            stream.send("end", "length")
            return
        with self._cond:
            self._waiting.appendleft(stream)

    def _begin(self, stream: Stream) -> None:
        row = self.engine.free_row()
        try:
            self.engine.begin(row, stream.request)
        except Exception as e:  # NOTE: checked at submit; anything else is this request's error, not the server's
            stream.send("end", f"error: {type(e).__name__}: {e}")
            return
        stream.hit = self.engine.hit_tokens(row)
        if self.metrics is not None:
            self.metrics.prefix_hit_tokens.inc(stream.hit)
        self._filling[row] = stream

    def _fill(self, row: int, beside: bool = False):
        """One prefill step of the prompt going into `row`; after its last, its first token goes out. beside:
        the decode chunk too (engine.step_and_fill), whose tokens it returns; a failure there is the loop's."""
        stream = self._filling[row]
        start = time.monotonic()
        out = None
        try:
            if beside:
                done, out = self.engine.step_and_fill(row)
            else:
                done = self.engine.fill(row)
        except Exception as e:
            if beside:
                raise
            self.engine.free(row)
            del self._filling[row]
            stream.send("end", f"error: {type(e).__name__}: {e}")
            return None
        finally:
            self._observe("prefill", time.monotonic() - start)
        if done is None:
            return out
        del self._filling[row]
        token, goes_on = done
        if self.metrics is not None:
            self.metrics.tokens_in.inc(len(stream.request.ids) - stream.hit)
        self._emit(stream, token, self.engine.scores.first.pop(row, None))
        if goes_on:
            stream.row = row
            self._running[row] = stream
        else:
            stream.send("end", self._reason(stream))
        return out

    def _distribute(self, out) -> None:
        scores = self.engine.scores.last
        for row, stream in list(self._running.items()):
            steps = [j for j, t in enumerate(out[row]) if t != NO_TOKEN]
            if steps:
                self._observe("itl", time.monotonic() - stream.last_at)
            for j in steps:
                wanted = scores is not None and stream.request.logprobs
                self._emit(stream, int(out[row][j]), scores.at(row, j) if wanted and scores is not None else None)
            if not self.engine.busy[row]:
                del self._running[row]
                stream.send("end", self._reason(stream))

    def _emit(self, stream: Stream, token: int, scores=None) -> None:
        now = time.monotonic()
        if stream.made == 0:
            self._observe("ttft", now - stream.submitted)
        if self.metrics is not None:
            self.metrics.tokens_out.inc()
        stream.made += 1
        stream.last, stream.last_at = token, now
        stream.send("token", token, scores)

    def _reason(self, stream: Stream) -> str:
        return "stop" if stream.last in self.engine.eos and not stream.request.ignore_eos else "length"

    def _observe(self, name: str, seconds: float) -> None:
        if self.metrics is not None:
            getattr(self.metrics, name).observe(seconds)

    def _gauge(self) -> None:
        if self.metrics is None:
            return
        g = self.engine.geometry
        self.metrics.busy.set(self.busy_rows)
        self.metrics.waiting.set(len(self._waiting))
        # NOTE: a running request holds its prompt's slots and one per token it made but the last; a prompt
        # going in is counted whole (its row's slots are its own from the first chunk)
        used = sum(len(s.request.ids) + s.made - 1 for s in self._running.values()) + sum(
            len(s.request.ids) for s in self._filling.values()
        )
        blocks = getattr(self.engine, "blocks", None)  # NOTE: a paged engine's BlockPool
        if blocks is None:
            self.metrics.kv_free.set(g.max_batch_size * g.max_length - used)
            return
        # NOTE: a request's blocks are its own from its begin on, reserved for its prompt and max_tokens
        self.metrics.kv_free.set(blocks.free_blocks * blocks.block_size)
        self.metrics.kv_blocks_free.set(blocks.free_blocks)
        self.metrics.kv_blocks_used.set(blocks.used_blocks)
        self.metrics.prefix_hit_rate.set(blocks.stats.hit_rate)
        if self.spec_metrics is not None:
            self.spec_metrics.update(self.engine.stats)


def _dropped(stream: Stream, now: float) -> str | None:
    if stream.cancelled:
        return "cancelled"
    if stream.deadline is not None and now > stream.deadline:
        return "timeout"
    return None
