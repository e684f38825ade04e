"""The batcher's wait (batcher.py): max_queue_delay counts from the oldest request's arrival or from the
end of the previous call, whichever is later. Closed-loop clients as many as max_batch_size then
share full batches; under Triton's rule alone, a late group would keep alternating with the first in
half batches forever. In-process: the model worker thread and its queue, driven by asyncio clients."""

import asyncio
import dataclasses
import os
import time

import numpy as np

from paddle_xla.serve.batcher import ModelWorker
from paddle_xla.serve.metrics import Metrics
from paddle_xla.serve.repository import load_model
from paddle_xla.serve.settings import Settings

CALL_S, DELAY_S, LATE_S = 0.3, 0.2, 0.25  # the late group arrives while the first group's call runs
ROUNDS, GROUP = 4, 4


class SlowArtifact:
    """The artifact's own answers, each call taking CALL_S once the warm-up is over; records rows per call."""

    def __init__(self, artifact):
        self.artifact, self.slow, self.rows = artifact, False, []

    def __getattr__(self, name):
        return getattr(self.artifact, name)

    def run(self, **feeds):
        if self.slow:
            self.rows.append(len(next(iter(feeds.values()))))
            time.sleep(CALL_S)
        return self.artifact.run(**feeds)


def test_closed_loop_clients_share_full_batches(model_dirs, artifacts):
    model = load_model(os.path.join(model_dirs["small"], "twoheads.pxa"), batching=True, buckets=False)
    slow = SlowArtifact(model.artifact)
    model = dataclasses.replace(model, artifact=slow)
    settings = Settings(max_batch_size=2 * GROUP, max_queue_delay_us=int(DELAY_S * 1e6), split_batches=False)
    rng = np.random.default_rng(0)
    answers = []

    async def client(worker, start_s):
        await asyncio.sleep(start_s)
        for _ in range(ROUNDS):
            x, y = rng.standard_normal((1, 8)).astype("float32"), rng.standard_normal((1, 4)).astype("float32")
            got = await worker.infer({"x": x, "y": y}, timeout_s=60)
            answers.append((got, artifacts["twoheads"].run(x=x, y=y)))

    async def main():
        worker = ModelWorker(model, settings, Metrics(), log=lambda line: None, on_failure=print)
        worker.start(asyncio.get_running_loop())
        while not worker.ready:
            await asyncio.sleep(0.01)
        slow.slow = True
        await asyncio.gather(
            *[client(worker, 0.0) for _ in range(GROUP)], *[client(worker, LATE_S) for _ in range(GROUP)]
        )
        worker.stop(10)

    asyncio.run(main())
    # NOTE: the first group alone, then everyone together; Triton's rule alone gives [4, 4, 4, 4, 4, 4, 4, 4]
    assert slow.rows[0] == GROUP and max(slow.rows) == 2 * GROUP and len(slow.rows) <= ROUNDS + 2, slow.rows
    for got, want in answers:
        for name, value in zip(artifacts["twoheads"].output_names, want):
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)
