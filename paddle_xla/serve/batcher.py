"""The dynamic batcher: one queue and one worker thread per model, with Triton's knobs.

The event loop decodes a request, pads it to its sequence buckets and queues it, then awaits a
future. The model's worker thread takes the oldest request and every queued request with the same
non-batch shapes (its group) in arrival order while their rows fit in max_batch_size; it waits up
to max_queue_delay for more, unless the batch is already full. The wait counts from the oldest
request's arrival (Triton's rule) or from the end of the previous call, whichever is later: the
clients that call just answered are about to send again, and closed-loop clients as many as
max_batch_size otherwise settle into two alternating half batches (measured: BERT-Base, 32 clients,
15 rows per call on average).
It pads the rows to the nearest preferred batch size and makes ONE call; each request gets back its
own rows. Where warm-up measured smaller calls to be cheaper per row (plan.py; --no-split-batches
turns it off), a batch takes no more rows than the largest call any plan makes, and a request bigger
than that runs as the planned calls in turn. One thread per model because XLA already spreads a
call over every core; a second call at once would only compete with it, and the event loop stays
free to take requests meanwhile.

A model without a batch dimension, or --no-batching, runs one request per call (still padded to a
preferred size, so that it never waits for a compile). Every padded shape is compiled at warm-up,
before the model reports ready."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import threading
import time
import traceback
from collections.abc import Callable

import numpy as np

from ..errors import CheckFailedError, FeedError
from . import padding, plan
from .metrics import Metrics
from .queue_thread import QueueThread
from .repository import ServedModel
from .request_errors import RequestError
from .settings import Settings
from .warmup import warm_up


@dataclasses.dataclass(eq=False)
class Job:
    inputs: dict[str, np.ndarray]  # padded to the sequence buckets
    rows: int  # its batch size (0 when the model has no batch dimension)
    group: tuple  # requests of one group may share a call
    lengths: dict[str, int]  # its own size of each bucketed dimension
    future: asyncio.Future
    enqueued: float = dataclasses.field(default_factory=time.monotonic)
    abandoned: bool = False  # timed out: answered already, skip it


class ModelWorker(QueueThread):
    """One model's queue, and the one thread that warms the model up and then runs its batches.
    Drained (QueueThread.drain), it sends what is queued without waiting for company."""

    def __init__(
        self,
        model: ServedModel,
        settings: Settings,
        metrics: Metrics,
        log: Callable[[str], None],
        on_failure: Callable[[str], None],
    ):
        super().__init__()
        self.model, self.settings, self.metrics, self.log, self.on_failure = model, settings, metrics, log, on_failure
        self.ready = False
        self._groups: dict[tuple, collections.deque[Job]] = {}
        self._queued = 0
        self._last_call_end = 0.0  # time.monotonic() when the previous call's answers went out
        self._plans: dict[tuple, dict[int, plan.Plan]] = {}  # measured at warm-up (plan.py)
        self._row_limits: dict[tuple, int] = {}  # the largest call any plan makes, per group
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._main, name=f"paddle-xla-serve {model.name}", daemon=True)

    @property
    def batched(self) -> bool:
        return self.model.layout.batch is not None

    # ---- the event loop's side ----
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread.start()

    async def infer(self, arrays: dict[str, np.ndarray], timeout_s: float | None) -> dict[str, np.ndarray]:
        """The model's outputs for one request; 503 when the queue is full, 504 past `timeout_s`."""
        inputs, lengths = padding.pad_to_buckets(arrays, self.model.layout, self.settings.seq_buckets)
        rows = len(next(iter(inputs.values()))) if self.batched else 0
        job = Job(inputs, rows, padding.group_of(inputs), lengths, asyncio.get_running_loop().create_future())
        self._submit(job)
        try:
            return await asyncio.wait_for(job.future, timeout_s)
        except TimeoutError:
            job.abandoned = True
            raise RequestError(
                504,
                f"Model {self.model.name!r} did not answer within the request's timeout "
                f"({(timeout_s or 0) * 1e3:.3g} ms); retry, or allow more time.",
            ) from None

    def _submit(self, job: Job) -> None:
        with self._cond:
            self._admit(self.model.name, self._queued, self.settings.max_queue_size, "queued")
            self._groups.setdefault(job.group, collections.deque()).append(job)
            self._set_queued(self._queued + 1)
            self._cond.notify()

    def stop(self, timeout_s: float) -> None:
        """Answer what is queued, then end the thread."""
        self.drain()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # ---- the worker thread ----
    def _main(self) -> None:
        try:
            timings = warm_up(
                self.model,
                self.settings,
                self.log,
                lambda: self._stopping,
                time_calls=self.settings.split_batches and self.settings.batching,
            )
            self._plans = self._measured_plans(timings)
        except Exception as e:  # NOTE: a model that cannot run stops the server (see server.py)
            self.on_failure(f"{self.model.name}: warm-up failed: {type(e).__name__}: {e}")
            return
        self.ready = True
        while (jobs := self._next_batch()) is not None:
            self._run(jobs)

    def _measured_plans(self, timings) -> dict[tuple, dict[int, plan.Plan]]:
        """Per request group, the cheapest calls for each row count; a group is planned only when every
        padded size was timed (else it keeps one padded call)."""
        sizes, plans = set(self.settings.preferred_batch_sizes), {}
        for group, timed in timings.items():
            if set(timed) == sizes:
                seconds = {n: t.best for n, t in timed.items()}
                noise = max(t.spread for t in timed.values())
                plans[group] = plan.cheapest_plans(seconds, self.settings.max_batch_size, noise)
                self._row_limits[group] = plan.largest_call(plans[group])
                if said := plan.describe(plans[group], seconds, noise):
                    self.log(f"{self.model.name}: {said}")
        return plans

    def _plan(self, group: tuple, rows: int) -> plan.Plan:
        planned = self._plans.get(group)
        return planned[rows] if planned else plan.padded_plan(rows, self.settings.preferred_batch_sizes)

    def _next_batch(self) -> list[Job] | None:
        with self._cond:
            while True:
                if not self._groups:
                    if self._stopping:
                        return None
                    self._cond.wait()
                    continue
                group = min(self._groups, key=lambda g: self._groups[g][0].enqueued)
                jobs, full = self._fill(self._groups[group], self._row_limits.get(group, self.settings.max_batch_size))
                wait = max(jobs[0].enqueued, self._last_call_end) + self._delay() - time.monotonic() if jobs else 0
                if full or wait <= 0 or self._stopping:
                    self._take(group, jobs)
                    if jobs:
                        return jobs
                    continue
                self._cond.wait(wait)

    def _delay(self) -> float:
        return self.settings.max_queue_delay_us / 1e6 if self.settings.batching and self.batched else 0.0

    def _fill(self, queue: collections.deque[Job], limit: int) -> tuple[list[Job], bool]:
        """The jobs a batch would take from this group now, and whether nothing more could join: rows up
        to `limit` (max_batch_size, or less where warm-up timed smaller calls cheaper per row: plan.py),
        and always the oldest job (one request may bring up to max_batch_size rows; its plan splits it)."""
        live = [job for job in queue if not job.abandoned]
        if not (self.settings.batching and self.batched):
            return live[:1], True
        jobs: list = []
        rows = 0
        for job in live:
            if jobs and rows + job.rows > limit:
                return jobs, True
            jobs.append(job)
            rows += job.rows
        return jobs, rows >= limit

    def _take(self, group: tuple, jobs: list[Job]) -> None:
        taken = {id(job) for job in jobs}
        rest = collections.deque(j for j in self._groups[group] if id(j) not in taken and not j.abandoned)
        removed = len(self._groups[group]) - len(rest)
        if rest:
            self._groups[group] = rest
        else:
            del self._groups[group]
        self._set_queued(self._queued - removed)

    def _set_queued(self, n: int) -> None:
        self._queued = n
        self.metrics.queue_depth.labels(self.model.name).set(n)

    def _run(self, jobs: list[Job]) -> None:
        try:
            answers = self._call(jobs)
        except Exception as e:
            error = self._request_error(e)
            for job in jobs:
                self._settle(job, None, error)
            return
        finally:
            self._last_call_end = time.monotonic()
        for job, answer in zip(jobs, answers):
            self._settle(job, answer, None)

    def _call(self, jobs: list[Job]) -> list[dict[str, np.ndarray]]:
        name, rows = self.model.name, [job.rows for job in jobs]
        if self.batched:
            calls = self._plan(jobs[0].group, sum(rows))
            feeds = padding.stack([job.inputs for job in jobs], sum(calls))
            self.metrics.batch_rows.labels(name).observe(sum(rows))
            self.metrics.batch_padded.labels(name).observe(sum(calls))
        else:
            calls, feeds = (), jobs[0].inputs
        self.metrics.batch_requests.labels(name).observe(len(jobs))
        start = time.perf_counter()
        outputs = self._run_calls(feeds, calls)
        self.metrics.compute.labels(name).observe(time.perf_counter() - start)
        named = dict(zip(self.model.outputs, outputs))
        if not self.batched:
            return [named]
        return padding.unstack(named, rows, [job.lengths for job in jobs], self.model.layout)

    def _run_calls(self, feeds: dict[str, np.ndarray], calls: plan.Plan) -> list[np.ndarray]:
        """The outputs for `feeds`, from one call, or from one call per planned size (rows in order)."""
        if len(calls) <= 1:
            return [np.asarray(o) for o in self.model.artifact.run(**feeds)]
        parts, start = [], 0
        for size in calls:
            part = {k: v[start : start + size] for k, v in feeds.items()}
            parts.append([np.asarray(o) for o in self.model.artifact.run(**part)])
            start += size
        return [np.concatenate(column) for column in zip(*parts)]

    def _request_error(self, e: Exception) -> RequestError:
        if isinstance(e, (FeedError, CheckFailedError)):
            return RequestError(400, f"Model {self.model.name!r}: {e}")
        self.log(f"{self.model.name}: a call failed:\n{traceback.format_exc()}")
        return RequestError(500, f"Model {self.model.name!r} failed: {type(e).__name__}: {e}")

    def _settle(self, job: Job, answer, error) -> None:
        # NOTE: RuntimeError: the loop is closed: the server stopped without waiting for this answer
        assert self._loop is not None  # NOTE: set when the batcher started
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(_resolve, job.future, answer, error)


def _resolve(future: asyncio.Future, answer, error) -> None:
    if future.done():  # NOTE: timed out (504 sent) before the answer came
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(answer)
