"""The host-side bookkeeping of a paged KV cache: which blocks of the pool each sequence holds (Paddle-free).

The device keeps one pool of `num_blocks` blocks of `block_size` token slots; a sequence's K/V lives in the
blocks its block table lists, in order. This module only decides the tables (pure Python, no arrays):

- Block 0 is the null block. It is never handed out: padding rows and the padding entries of block tables
  point at it, so whatever the device writes there is garbage nobody reads.
- A sequence is admitted with its prompt and the most tokens it may ever hold, and gets all of its blocks
  at once. A running sequence therefore never runs out of blocks; a request that does not fit waits.
- Prefix cache: a full prompt block is known by a key that chains the keys of the blocks before it, so equal
  keys mean equal token prefixes. A new prompt reuses (shares) the longest run of leading blocks already
  cached. Once the engine has written a prompt's K/V, `commit_prompt` registers its full blocks. A
  registered block is never written again; a released one stays cached until its slot is needed, and the
  least recently released is evicted first.

`BlockPool.check` states every invariant, and tests call it after each step.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from ..errors import GenerationError

NULL_BLOCK = 0  # NOTE: padding points here; never in a table, never free, never cached

# NOTE: keys are SHA-256 digests rather than the nested tuples themselves: Python does not cache a tuple's
# hash, so a dict lookup of a nested key would rehash the whole prefix (quadratic work over a long prompt),
# and a 32-byte digest is the same in every process (a key could be logged or shared between hosts).
_ROOT_KEY = hashlib.sha256(b"paddle_xla.generation.blocks: prefix root").digest()


def _block_key(parent: bytes, tokens: Sequence[int]) -> bytes:
    # NOTE: 8 bytes per token and a fixed-size parent make the encoding injective, so distinct
    # (parent, tokens) pairs only share a key through a SHA-256 collision
    return hashlib.sha256(parent + struct.pack(f"<{len(tokens)}q", *tokens)).digest()


def prompt_block_keys(prompt: Sequence[int], block_size: int) -> tuple[bytes, ...]:
    """The chained keys of the prompt's full blocks, in order (a partial last block has none)."""
    keys = []
    parent = _ROOT_KEY
    for start in range(0, len(prompt) - block_size + 1, block_size):
        parent = _block_key(parent, prompt[start : start + block_size])
        keys.append(parent)
    return tuple(keys)


@dataclass(frozen=True)
class Admission:
    table: tuple[int, ...]  # the sequence's block ids in order
    hit_tokens: int  # leading prompt tokens whose K/V are already in the table's first blocks


@dataclass
class PrefixCacheStats:
    queried_tokens: int = 0  # prompt tokens looked up, at admissions that succeeded
    hit_tokens_total: int = 0  # of those, the tokens found in the cache

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens_total / self.queried_tokens if self.queried_tokens else 0.0


@dataclass
class _Sequence:
    table: tuple[int, ...]
    prompt_keys: tuple[bytes, ...]  # keys of the prompt's full blocks (empty with the prefix cache off)
    prompt_blocks: int  # how many full blocks the prompt fills
    hit_blocks: int
    committed: bool = False

    @property
    def writable_from(self) -> int:
        """The first table index the engine may still write: past the hits, and past the whole prompt once
        committed (decode writes land after the prompt; the committed blocks may now be shared)."""
        return self.prompt_blocks if self.committed else self.hit_blocks


def _require(condition: bool, message: str) -> None:
    # NOTE: not `assert`: check() must still check under python -O
    if not condition:
        raise AssertionError(message)


class BlockPool:
    """The block tables of a paged KV cache of `num_blocks` blocks of `block_size` tokens, with a prefix cache."""

    def __init__(self, num_blocks: int, block_size: int, prefix_cache: bool = True, granule: int = 1) -> None:
        if num_blocks < 2:
            raise GenerationError(f"a KV cache of {num_blocks} blocks is too small: block 0 is reserved, use >= 2")
        if block_size < 1:
            raise GenerationError(f"block_size={block_size} must be at least 1 token")
        if granule < 1:
            raise GenerationError(f"granule={granule} must be at least 1 block")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_cache = prefix_cache
        # NOTE: hits and registrations come in whole granules of blocks: an engine whose prefill computes a
        # block's K/V the same way only at its prefill-chunk boundaries (paged_engine.py) sets its chunk here
        self.granule = granule
        self.stats = PrefixCacheStats()
        # NOTE: reversed so that pop() hands out 1, 2, 3, ... first (tables are easy to read in tests and logs)
        self._free: list[int] = list(range(num_blocks - 1, NULL_BLOCK, -1))
        self._lru: OrderedDict[int, None] = OrderedDict()  # cached, unreferenced; least recently released first
        self._refcount = [0] * num_blocks
        self._key_of_block: dict[int, bytes] = {}
        self._block_of_key: dict[bytes, int] = {}
        self._seqs: dict[Hashable, _Sequence] = {}

    # ---- sizes

    @property
    def usable_blocks(self) -> int:
        return self.num_blocks - 1

    @property
    def capacity_tokens(self) -> int:
        return self.usable_blocks * self.block_size

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    @property
    def free_blocks(self) -> int:
        """Blocks an admission could take now: truly free ones and cached ones no sequence references."""
        return len(self._free) + len(self._lru)

    @property
    def used_blocks(self) -> int:
        """Blocks referenced by at least one sequence."""
        return self.usable_blocks - self.free_blocks

    @property
    def cached_blocks(self) -> int:
        """Blocks holding a prefix key, referenced or not."""
        return len(self._key_of_block)

    # ---- per sequence

    def table(self, seq: Hashable) -> tuple[int, ...]:
        return self._seqs[seq].table

    def hit_tokens(self, seq: Hashable) -> int:
        return self._seqs[seq].hit_blocks * self.block_size

    def __contains__(self, seq: Hashable) -> bool:
        return seq in self._seqs

    # ---- admission

    def prefix_hits(self, prompt: Sequence[int]) -> tuple[int, ...]:
        """The cached blocks an admission of this prompt would reuse now (a scheduler may ask before admitting)."""
        return self._hits(self._keys(prompt), len(prompt))

    def admit(
        self, seq: Hashable, prompt: Sequence[int], total_tokens: int, cacheable: bool = True
    ) -> Admission | None:
        """Reserve the blocks of a sequence that may hold `total_tokens` tokens; None if they are not free now.
        cacheable False: the prompt's blocks are never registered (an engine computes them another way)."""
        self._check_request(seq, prompt, total_tokens)
        keys = self._keys(prompt) if cacheable else ()
        hits = self._hits(keys, len(prompt))
        fresh = self.blocks_for(total_tokens) - len(hits)
        if fresh > self._allocatable_besides(hits):
            return None
        for block in hits:
            self._reference(block)
        table = hits + tuple(self._allocate() for _ in range(fresh))
        self._seqs[seq] = _Sequence(table, keys, len(prompt) // self.block_size, len(hits))
        if self.prefix_cache:
            self.stats.queried_tokens += len(prompt)
            self.stats.hit_tokens_total += len(hits) * self.block_size
        return Admission(table, len(hits) * self.block_size)

    def _check_request(self, seq: Hashable, prompt: Sequence[int], total_tokens: int) -> None:
        if seq in self._seqs:
            raise ValueError(f"sequence {seq!r} is already admitted")
        if not prompt:
            raise ValueError("the prompt is empty: a sequence needs at least one prompt token")
        if total_tokens < len(prompt):
            raise ValueError(f"total_tokens={total_tokens} is less than the prompt's {len(prompt)} tokens")
        needed = self.blocks_for(total_tokens)
        if needed > self.usable_blocks:
            raise GenerationError(
                f"a request of {total_tokens} tokens needs {needed} blocks of {self.block_size} tokens; the KV "
                f"cache holds {self.usable_blocks} blocks ({self.capacity_tokens} tokens): raise "
                "--kv-cache-tokens or lower max_tokens"
            )

    def _keys(self, prompt: Sequence[int]) -> tuple[bytes, ...]:
        if not self.prefix_cache:
            return ()
        keys = prompt_block_keys(prompt, self.block_size)
        return keys[: len(keys) // self.granule * self.granule]

    def _hits(self, keys: Sequence[bytes], prompt_tokens: int) -> tuple[int, ...]:
        # NOTE: the prompt's last token is always prefilled (the engine needs its logits), so only blocks
        # lying wholly within the first prompt_tokens - 1 tokens may be hits
        hittable = (prompt_tokens - 1) // self.block_size // self.granule * self.granule
        hits = []
        for key in keys[:hittable]:
            block = self._block_of_key.get(key)
            if block is None:
                break
            hits.append(block)
        return tuple(hits[: len(hits) // self.granule * self.granule])

    def _allocatable_besides(self, hits: Iterable[int]) -> int:
        # NOTE: a hit that sits in the LRU list is about to be referenced again: it is no block to evict
        return self.free_blocks - sum(1 for block in hits if block in self._lru)

    def _reference(self, block: int) -> None:
        if self._refcount[block] == 0:
            del self._lru[block]  # NOTE: in use again, so no longer evictable
        self._refcount[block] += 1

    def _allocate(self) -> int:
        if self._free:
            block = self._free.pop()
        else:
            block, _ = self._lru.popitem(last=False)
            self._forget_key(block)
        self._refcount[block] = 1
        return block

    def _forget_key(self, block: int) -> None:
        del self._block_of_key[self._key_of_block.pop(block)]

    # ---- after the prompt, at the end

    def commit_prompt(self, seq: Hashable) -> None:
        """The prompt's K/V is written: register its full blocks so that later prompts can share them."""
        state = self._seqs[seq]
        state.committed = True
        for key, block in zip(state.prompt_keys, state.table):
            # NOTE: an equal prefix registered first (by a sequence admitted alongside) keeps its block; this
            # sequence's copy stays unregistered and goes back to the free list at release
            if key not in self._block_of_key:
                self._block_of_key[key] = block
                self._key_of_block[block] = key

    def release(self, seq: Hashable) -> None:
        """The sequence finished or was cancelled (committed or not): give its blocks back."""
        state = self._seqs.pop(seq)
        # NOTE: in reverse, so the LRU evicts a prefix's deeper blocks before the ones they chain from
        # (a deeper block can only be hit while every block before it is still cached)
        for block in reversed(state.table):
            self._refcount[block] -= 1
            if self._refcount[block] == 0:
                self._unreference(block)

    def _unreference(self, block: int) -> None:
        if block in self._key_of_block:
            self._lru[block] = None
        else:
            self._free.append(block)

    # ---- invariants

    def check(self) -> None:
        """Raise AssertionError if any invariant of the pool is broken."""
        self._check_partition()
        self._check_refcounts()
        self._check_keys()
        for seq, state in self._seqs.items():
            self._check_table(seq, state)
        _require(self.stats.hit_tokens_total <= self.stats.queried_tokens, f"stats {self.stats} hit more than asked")

    def _check_partition(self) -> None:
        free = set(self._free)
        _require(len(free) == len(self._free), f"the free list repeats a block: {self._free}")
        cached = set(self._lru)
        referenced = {block for block, count in enumerate(self._refcount) if count > 0}
        _require(not free & cached, f"blocks both free and cached: {sorted(free & cached)}")
        _require(not free & referenced, f"free blocks still referenced: {sorted(free & referenced)}")
        _require(not cached & referenced, f"LRU blocks still referenced: {sorted(cached & referenced)}")
        usable = set(range(1, self.num_blocks))
        union = free | cached | referenced
        _require(union == usable, f"blocks lost {sorted(usable - union)} or foreign {sorted(union - usable)}")
        _require(all(block in self._key_of_block for block in cached), "an LRU block has no key")
        _require(not free & self._key_of_block.keys(), "a free block still has a key")

    def _check_refcounts(self) -> None:
        counts = [0] * self.num_blocks
        for state in self._seqs.values():
            _require(len(set(state.table)) == len(state.table), f"a table repeats a block: {state.table}")
            for block in state.table:
                _require(0 <= block < self.num_blocks, f"block {block} is outside the pool")
                counts[block] += 1
        _require(counts[NULL_BLOCK] == 0, "the null block is in a table")
        _require(counts == self._refcount, f"refcounts {self._refcount} != table counts {counts}")

    def _check_keys(self) -> None:
        _require(len(self._key_of_block) == len(self._block_of_key), "the key maps differ in size")
        for key, block in self._block_of_key.items():
            _require(self._key_of_block.get(block) == key, f"block {block} and the key map disagree")
        _require(NULL_BLOCK not in self._key_of_block, "the null block has a key")
        _require(self.prefix_cache or not self._key_of_block, "a block was registered with the prefix cache off")

    def _check_table(self, seq: Hashable, state: _Sequence) -> None:
        _require(state.hit_blocks <= len(state.prompt_keys), f"{seq!r} hit more blocks than its prompt keys")
        for index, block in enumerate(state.table):
            key = self._key_of_block.get(block)
            if index < state.hit_blocks:
                _require(key == state.prompt_keys[index], f"{seq!r}'s hit block {block} lost its key")
            if key is not None:
                # NOTE: this is what makes a hit safe: a keyed block holds exactly this table's prompt prefix
                own = state.prompt_keys[index] if index < len(state.prompt_keys) else None
                _require(key == own, f"{seq!r}'s block {block} at {index} is keyed for another prefix")
            if index >= state.writable_from:
                _require(key is None, f"{seq!r}'s writable block {block} at {index} is registered")
                _require(self._refcount[block] == 1, f"{seq!r}'s writable block {block} at {index} is shared")
            if self._refcount[block] > 1:
                _require(key is not None, f"block {block} is shared but holds no committed prompt block")
