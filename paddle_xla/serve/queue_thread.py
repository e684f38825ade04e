"""What a served model's thread and its queue share, in serve/batcher.py's ModelWorker and in
serve/llm/scheduler.py's Scheduler: one condition over the queue, and draining, after which the queue
refuses new requests with a 503. What each thread then does with the requests it holds is its own (each
one's stop says). Paddle-free."""

from __future__ import annotations

import threading

from .request_errors import unavailable

SHUTTING_DOWN = "The server is shutting down; send the request to another replica."


class QueueThread:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._stopping = False

    def drain(self) -> None:
        """Take no new requests (503); the thread's loop sees `_stopping` and winds down."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def _admit(self, model: str, held: int, limit: int, where: str) -> None:
        """Under `_cond`: a 503 while draining, or when `held` requests already fill the queue."""
        if self._stopping:
            raise unavailable(SHUTTING_DOWN)
        if held >= limit:
            raise unavailable(
                f"Model {model!r} has {held} requests {where}, its limit (--max-queue-size); retry later."
            )
