"""Batch plans: how a batch of n rows runs as calls of the compiled (preferred) batch sizes.

A bigger call is not always cheaper per row: on a 2-core CPU ResNet-50 bf16 runs batch 8 in 132 ms
(60.6 rows/s) and batch 32 in 634 ms (50.5 rows/s); BERT-Base 39.8 against 28.5 rows/s (the
activations of a big batch leave the caches). Warm-up times one call of every padded size, and the
cheapest sequence of those sizes that holds n rows (32 rows as 4 calls of 8 there) is found for every n
by dynamic programming. The batcher then forms batches of at most the largest call any plan makes (8
there: queued requests go in 8-row calls, each answered when its call ends) and runs a single request
of more rows than that as its plan's calls in turn. Without timings (the warm-up could not time
a size), a batch is one call padded up to the nearest size, as Triton does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .padding import padded_size

Plan = tuple[int, ...]


def padded_plan(rows: int, sizes: Sequence[int]) -> Plan:
    """One call of the smallest of `sizes` that holds `rows` (the sizes end at the largest batch)."""
    return (padded_size(rows, sizes),)


# NOTE: a split must save this much of the padded call's time: two timed calls per size are noisy, and
# the slicing and joining of a split are not timed
MIN_SAVING = 0.05


def cheapest_plans(seconds: Mapping[int, float], max_rows: int, noise: float = 0.0) -> dict[int, Plan]:
    """For every row count 1..max_rows, the sequence of sizes (largest first) whose calls, timed as
    `seconds`, hold those rows in the least time; of equal times, the one with fewer calls. A plan of
    several calls is kept only where it saves MIN_SAVING of the one padded call's time, and more
    than `noise` seconds (the spread of repeated timings of one call, measured at warm-up): for a
    model of sub-millisecond calls a split would follow the timer's jitter."""
    sizes = sorted(seconds)
    best: list[tuple[float, int, Plan]] = [(0.0, 0, ())]
    for n in range(1, max_rows + 1):
        options = []
        for size, t in seconds.items():
            cost, calls, plan = best[max(0, n - size)]
            options.append((cost + t, calls + 1, tuple(sorted((size, *plan), reverse=True))))
        best.append(min(options))
    plans = {}
    for n in range(1, max_rows + 1):
        padded = padded_plan(n, sizes) if n <= sizes[-1] else best[n][2]
        padded_time = sum(seconds[s] for s in padded)
        saves = best[n][0] <= (1 - MIN_SAVING) * padded_time and padded_time - best[n][0] > noise
        plans[n] = best[n][2] if saves else padded
    return plans


def largest_call(plans: Mapping[int, Plan]) -> int:
    """The biggest call any plan makes: more rows than this in one batch only cost more per row."""
    return max(max(p) for p in plans.values())


def describe(plans: Mapping[int, Plan], seconds: Mapping[int, float], noise: float = 0.0) -> str:
    """How batches run, when some size is never called whole: '' when every plan is one call."""
    split = [f"{n} rows as {'+'.join(map(str, plans[n]))}" for n in sorted(seconds) if n in plans and len(plans[n]) > 1]
    if not split:
        return ""
    timed = ", ".join(f"b{n} {_ms(t)}" for n, t in sorted(seconds.items()))
    return (
        f"batches of at most {largest_call(plans)} rows, a larger request in parts ({'; '.join(split)}): "
        f"measured {timed} (timing noise {_ms(noise)})"
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.2f} ms"
