"""Which data ranks each process reads, and how one optimizer step's micro-batches are laid out for the
compiled step. Paddle-free (numpy only).

PaddleFormers gives each of its data-parallel ranks its own batch (per_device_train_batch_size rows,
dealt by its distributed sampler) and averages the ranks' gradients. paddle_xla runs those ranks as
the Strategy's replicas, whatever the number of processes: replica r trains on what rank r would have
read. The compiled step takes one global batch laid out replica by replica, and inside a replica micro-
batch by micro-batch; under several processes each process feeds an equal block of those rows, in
process order (parallel/shares.py), so each process reads the ranks its block covers."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import FeedError


@dataclasses.dataclass(frozen=True)
class ProcessRows:
    """The data ranks [first, stop) this process reads, and its block of the global rows."""

    first: int
    stop: int
    ranks: int  # all the data ranks (the Strategy's replicas)
    processes: int
    index: int  # this process

    @staticmethod
    def of(ranks: int, processes: int, index: int) -> ProcessRows:
        """Ranks r0..r1 whose rows this process's block covers: its own ranks when they divide among the
        processes, else the one rank several processes share (each feeds a part of its rows)."""
        if ranks % processes == 0:
            per = ranks // processes
            return ProcessRows(index * per, (index + 1) * per, ranks, processes, index)
        if processes % ranks == 0:
            rank = index // (processes // ranks)
            return ProcessRows(rank, rank + 1, ranks, processes, index)
        raise FeedError(
            f"{ranks} data-parallel replicas cannot be dealt evenly over {processes} processes: "
            "use a replica count that divides the process count or is divided by it."
        )

    def block(self, micro: list[dict]) -> dict:
        """One step's micro-batches (each holding the ranks r0..r1's batches one after another) -> this
        process's rows of the global batch, laid out replica-major (rank, then micro-batch)."""
        here = self.stop - self.first
        names = list(micro[0])
        rows = micro[0][names[0]].shape[0]
        if rows % here:
            raise FeedError(f"A micro-batch of {rows} rows does not hold {here} equal rank batches.")
        per_rank = rows // here
        out = {
            n: np.concatenate([m[n][r * per_rank : (r + 1) * per_rank] for r in range(here) for m in micro])
            for n in names
        }
        if self.processes <= self.ranks:
            return out
        # NOTE: several processes share one rank: each feeds its part of the rank's rows, in process order
        sharing = self.processes // self.ranks
        total = per_rank * len(micro)
        if total % sharing:
            raise FeedError(
                f"{sharing} processes share one data-parallel replica, whose step holds {total} "
                f"rows (per_device_train_batch_size x gradient_accumulation_steps): make it "
                f"divisible by {sharing}."
            )
        part, k = total // sharing, self.index % sharing
        return {n: x[k * part : (k + 1) * part] for n, x in out.items()}
