"""Batch plans: how a batch of n rows runs as calls of the compiled (preferred) batch sizes.

A bigger call is not always cheaper per row: on a 2-core CPU ResNet-50 bf16 runs batch 8 in 132 ms
(60.6 rows/s) and batch 32 in 634 ms (50.5 rows/s); BERT-Base 39.8 against 28.5 rows/s (the
activations of a big batch leave the caches). Warm-up times one call of every padded size, and a
batch then runs as the cheapest sequence of those sizes that holds its rows (32 rows as 4 calls of 8
there), found by dynamic programming over the row counts. Without timings (the warm-up could not time
a size), a batch is one call padded up to the nearest size, as Triton does."""
from __future__ import annotations

from typing import Mapping, Sequence

from .padding import padded_size

Plan = tuple[int, ...]


def padded_plan(rows: int, sizes: Sequence[int]) -> Plan:
    """One call of the smallest of `sizes` that holds `rows` (the sizes end at the largest batch)."""
    return (padded_size(rows, sizes),)


def cheapest_plans(seconds: Mapping[int, float], max_rows: int) -> dict[int, Plan]:
    """For every row count 1..max_rows, the sequence of sizes (largest first) whose calls, timed as
    `seconds`, hold those rows in the least time; of equal times, the one with fewer calls."""
    best: list[tuple[float, int, Plan]] = [(0.0, 0, ())]
    for n in range(1, max_rows + 1):
        options = []
        for size, t in seconds.items():
            cost, calls, plan = best[max(0, n - size)]
            options.append((cost + t, calls + 1, tuple(sorted((size, *plan), reverse=True))))
        best.append(min(options))
    return {n: best[n][2] for n in range(1, max_rows + 1)}


def describe(plans: Mapping[int, Plan], seconds: Mapping[int, float]) -> str:
    """'32 rows as 8+8+8+8' for each largest size that does not run alone, '' when none is split."""
    split = [f"{n} rows as {'+'.join(map(str, plans[n]))}" for n in sorted(seconds) if n in plans and len(plans[n]) > 1]
    timed = ", ".join(f"b{n} {t * 1e3:.0f} ms" for n, t in sorted(seconds.items()))
    return f"{'; '.join(split)} (measured {timed})" if split else ""
