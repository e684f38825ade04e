"""The scheduler's admission while streams run: about one prefill chunk of prompt tokens beside each decode
chunk (several short prompts at once, one step of a long one), first come first served."""

import asyncio

import numpy as np

from paddle_xla.generation.batch_engine import Geometry
from paddle_xla.generation.continuous import Request, ScoresOut
from paddle_xla.serve.llm.scheduler import Scheduler, Stream


class Recording:
    """An engine of 8 rows that records what each round ran: the prompts filled alone, the one filled beside
    the decode chunk, and the decode chunks. Every request makes a token per chunk and runs until freed."""

    eos = ()

    def __init__(self):
        self.geometry = Geometry(8, 256, 1, 1, 4, 100, chunk=1, prefill_chunk=64)
        self.busy = np.zeros(8, bool)
        self.steps: dict[int, int] = {}
        self.log: list[tuple] = []
        self.scores = ScoresOut(8)  # NOTE: no request here asks for logprobs

    def fits_now(self, request):
        return True

    def free_row(self):
        return int(np.flatnonzero(~self.busy)[0])

    def begin(self, row, request):
        self.busy[row] = True
        self.steps[row] = self.geometry.chunks(len(request.ids))

    def hit_tokens(self, row):
        return 0

    def fill(self, row):
        self.log.append(("fill", row))
        self.steps[row] -= 1
        return (5, True) if self.steps[row] == 0 else None

    def step_and_fill(self, row):
        self.log.append(("beside", row))
        self.steps[row] -= 1
        return ((5, True) if self.steps[row] == 0 else None), self.run_chunk(logged=False)

    def run_chunk(self, logged=True):
        if logged:
            self.log.append(("chunk",))
        return np.where(self.busy, 7, -1)[:, None]

    def free(self, row):
        self.busy[row] = False


def _round(scheduler, engine):
    engine.log.clear()
    assert scheduler._next()
    return list(engine.log)


def test_short_prompts_go_in_several_per_decode_chunk_and_a_long_one_a_chunk_at_a_time():
    engine, loop = Recording(), asyncio.new_event_loop()
    scheduler = Scheduler("m", engine, max_waiting=16, log=print, on_failure=print)

    def submit(*lengths):
        for n in lengths:
            scheduler.submit(Stream(Request((3,) * n, 50), loop))

    try:
        submit(10, 100)  # NOTE: nothing runs: both go in whole (100 tokens: 2 chunks of 64), then a chunk
        assert _round(scheduler, engine) == [("fill", 0), ("fill", 1), ("fill", 1), ("chunk",)]
        # NOTE: first prefill steps of 32, 32, 16, 64 tokens against a budget of 64 per decode chunk
        submit(20, 20, 10, 100)
        assert _round(scheduler, engine) == [("fill", 2), ("beside", 3)]
        assert _round(scheduler, engine) == [("beside", 4)]  # NOTE: 16 + 64 > 64: the long one waits
        assert _round(scheduler, engine) == [("beside", 5)]  # its first chunk, alone
        assert _round(scheduler, engine) == [("beside", 5)]  # its last
        assert _round(scheduler, engine) == [("chunk",)]
        assert len(scheduler._running) == 6 and not scheduler._waiting
    finally:
        loop.close()


def test_a_larger_prefill_budget_lets_more_short_prompts_in_per_decode_chunk():
    engine, loop = Recording(), asyncio.new_event_loop()
    scheduler = Scheduler("m", engine, max_waiting=16, log=print, on_failure=print, max_prefill_tokens=128)
    try:
        for n in (10, 20, 20, 10, 100, 10):
            scheduler.submit(Stream(Request((3,) * n, 50), loop))
            if n == 10 and not scheduler._running:
                assert _round(scheduler, engine) == [("fill", 0), ("chunk",)]
        # NOTE: widths 32 + 32 + 16 = 80 of 128; the 100-token prompt's first step (64) would pass it
        assert _round(scheduler, engine) == [("fill", 1), ("fill", 2), ("beside", 3)]
        assert _round(scheduler, engine) == [("fill", 4), ("beside", 5)]  # NOTE: 64 + 16
    finally:
        loop.close()
