"""The server's settings, as the CLI's flags give them, checked once at start-up."""
from __future__ import annotations

import dataclasses
from typing import Sequence


@dataclasses.dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    max_batch_size: int = 16            # rows (the sum of the requests' batch dims) in one call
    max_queue_delay_us: int = 2000      # how long the first request of a batch waits for company
    preferred_batch_sizes: tuple[int, ...] = ()   # () -> powers of two up to max_batch_size
    seq_buckets: tuple[int, ...] = ()   # lengths free non-batch dims are padded up to; () -> none
    batching: bool = True
    split_batches: bool = True          # run a batch as the calls warm-up measured cheapest (plan.py)
    max_queue_size: int = 256           # queued requests per model before 503
    request_timeout_ms: int = 60_000    # 0 -> no server-side timeout
    max_body_mb: float = 64.0
    body_timeout_s: float = 30.0        # a request body not all here by then gets 408
    token: str | None = None

    def __post_init__(self):
        for name in ("max_batch_size", "max_queue_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(self, name)}.")
        for name in ("max_queue_delay_us", "request_timeout_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be 0 or more, not {getattr(self, name)}.")
        if self.max_body_mb <= 0:
            raise ValueError(f"--max-body-mb must be positive, not {self.max_body_mb}.")
        if self.body_timeout_s <= 0:
            raise ValueError(f"--body-timeout-s must be positive, not {self.body_timeout_s}.")
        if any(b < 1 for b in self.seq_buckets):
            raise ValueError(f"--seq-buckets must all be at least 1, not {list(self.seq_buckets)}.")
        object.__setattr__(self, "preferred_batch_sizes", padded_sizes(self.max_batch_size, self.preferred_batch_sizes))
        object.__setattr__(self, "seq_buckets", tuple(sorted(set(self.seq_buckets))))

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 2**20)


def padded_sizes(max_batch_size: int, preferred: Sequence[int]) -> tuple[int, ...]:
    """The batch sizes every call is padded up to: the preferred ones (default: powers of two), and
    always max_batch_size itself, so that every batch has a size to pad to that was compiled at warm-up."""
    if not preferred:
        preferred = [1 << i for i in range(max_batch_size.bit_length()) if 1 << i <= max_batch_size]
    bad = [b for b in preferred if not 1 <= b <= max_batch_size]
    if bad:
        raise ValueError(f"--preferred-batch-sizes {bad} must lie in 1..{max_batch_size} (--max-batch-size).")
    return tuple(sorted({*preferred, max_batch_size}))


def parse_sizes(text: str | None, flag: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4); None or '' -> ()."""
    if not text:
        return ()
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"{flag} takes whole numbers separated by commas, e.g. 1,2,4,8; got {text!r}.") from None
