"""The memory a served language model needs on one device: its weights as held, its KV-cache pool, and the
working arrays of its largest decode chunk and of a prompt going in, beside them; and how large a pool a
device holds. The pool is sized as a server sizes it (`--kv-cache-tokens`, or `--kv-cache-memory` F: F of
what the weights leave). Paddle-free.

The working arrays are counted from the engine's shapes (generation/paged.py), not measured:
- a decode chunk of R rows over N blocks gathers the rows' blocks into one view, R x N x block_size tokens
  of keys and values (its largest bucket: every row's whole table);
- a prompt going in is prefilled into a batch-1 view of max_length slots (a prefix-cache hit builds one
  too);
- each row's logits and the sampling's copies of them (processed logits, probabilities, top-p's sorted copy
  and its int64 indices, the random bits of a draw, the masks): arrays of the vocabulary, SAMPLING_ARRAYS
  float32's worth per row and LOGITS_ARRAYS more per position a step computes (a speculating step's k + 1).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import StrategyError

GIB = 2**30
# NOTE: what XLA:CPU allots a decode chunk per row and vocabulary entry, in float32's worth (memory_analysis of
# the largest bucket at vocabularies of 4096 and 16384): 13.7 at one position, 21.8 at four (ngram, k = 3);
# rounded up. The former count (4 per row and position) was a third of it at one position.
SAMPLING_ARRAYS = 11
LOGITS_ARRAYS = 3


def kv_token_bytes(layers: int, kv_heads: int, head_dim: int, itemsize: int) -> int:
    """One token's keys and values over every layer."""
    return 2 * layers * kv_heads * head_dim * itemsize


def pool_tokens(fraction: float, free_bytes: float, token_bytes: int, block_size: int) -> int:
    """The KV-cache tokens, in whole blocks, that `fraction` of `free_bytes` holds (the server's sizing:
    generation/paged_engine.py's kv_tokens_in_memory, and the plan's)."""
    return int(fraction * max(free_bytes, 0) // token_bytes) // block_size * block_size


@dataclass(frozen=True)
class ServingShape:
    """What a served generator's memory depends on (a PagedEngine's geometry and buckets)."""

    layers: int
    kv_heads: int
    head_dim: int
    cache_itemsize: int  # bytes of one cached number (4 fp32, 2 bf16)
    vocab_size: int
    max_length: int
    block_size: int
    rows: int  # the largest decode bucket's rows (max_seqs)
    table_slots: int  # the largest decode bucket's slots per row (its blocks x block_size)
    positions: int = 1  # tokens a step computes per row (k + 1 when it speculates: its verify step)

    @property
    def kv_token_bytes(self) -> int:
        return kv_token_bytes(self.layers, self.kv_heads, self.head_dim, self.cache_itemsize)

    def work_parts(self) -> list[tuple[str, int]]:
        """The working arrays beside the weights and the pool (the module docstring's three), named."""
        return [
            (
                f"decode chunk's gathered blocks: {self.rows} rows x {self.table_slots} slots",
                self.rows * self.table_slots * self.kv_token_bytes,
            ),
            (f"a prompt's prefill view: {self.max_length} slots", self.max_length * self.kv_token_bytes),
            (
                f"logits and sampling: {self.rows} rows x {self.positions} positions x {self.vocab_size}",
                (SAMPLING_ARRAYS + LOGITS_ARRAYS * self.positions) * self.rows * self.vocab_size * 4,
            ),
        ] + (
            # NOTE: a speculating engine keeps each sequence's last round's K/V until its next round writes them
            [
                (
                    f"speculation's pending K/V: {self.rows} rows x {self.positions}",
                    self.rows * self.positions * self.kv_token_bytes,
                )
            ]
            if self.positions > 1
            else []
        )

    @property
    def work_bytes(self) -> int:
        return sum(size for _, size in self.work_parts())


@dataclass(frozen=True)
class ServingMemory:
    device: str
    memory_bytes: float
    weight_bytes: int
    kv_tokens: int
    shape: ServingShape

    @property
    def kv_bytes(self) -> int:
        return self.kv_tokens * self.shape.kv_token_bytes

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.shape.work_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.memory_bytes

    @property
    def most_kv_tokens(self) -> int:
        """The largest pool, in whole blocks, that fits beside the weights and the working arrays."""
        room = self.memory_bytes - self.weight_bytes - self.shape.work_bytes
        return pool_tokens(1.0, room, self.shape.kv_token_bytes, self.shape.block_size)

    def table(self) -> str:
        s = self.shape
        rows = [
            ("weights, as held", self.weight_bytes),
            (f"KV cache: {self.kv_tokens} tokens x {s.kv_token_bytes} bytes", self.kv_bytes),
            *s.work_parts(),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"serving memory on one {self.device} ({size_text(self.memory_bytes)}):"]
        lines += [f"  {name:<{width}}  {size_text(size):>11}" for name, size in rows]
        verdict = "fits" if self.fits else "does NOT fit"
        lines.append(f"  {'total':<{width}}  {size_text(self.total_bytes):>11}: {verdict}")
        lines.append(f"the largest KV cache that fits: {self.most_kv_tokens} tokens (--kv-cache-tokens)")
        return "\n".join(lines)


def size_text(n: float) -> str:
    """n bytes in GiB, MiB, KiB or bytes, whichever reads best."""
    for unit, scale in (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def serving_memory(
    shape: ServingShape,
    weight_bytes: int,
    device: str,
    memory_bytes: float,
    kv_tokens: int | None = None,
    kv_cache_memory: float | None = None,
) -> ServingMemory:
    """The memory of a server holding `shape`'s engine on one device of `memory_bytes`: a pool of kv_tokens,
    or (kv_cache_memory F) F of the memory the weights leave, in whole blocks, as a server sizes it on a
    device that reports its memory (generation/paged_engine.py: kv_tokens_in_memory)."""
    if kv_cache_memory is not None:
        if not 0 < kv_cache_memory < 1:
            raise StrategyError(f"kv_cache_memory={kv_cache_memory} is no fraction of the memory: give 0 < F < 1")
        kv_tokens = pool_tokens(kv_cache_memory, memory_bytes - weight_bytes, shape.kv_token_bytes, shape.block_size)
    if kv_tokens is None:
        raise StrategyError("serving_memory needs kv_tokens or kv_cache_memory")
    return ServingMemory(device, memory_bytes, weight_bytes, kv_tokens, shape)
