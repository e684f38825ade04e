"""The paged KV cache's block tables and prefix cache (generation/blocks.py): unit cases, and a hypothesis state
machine that admits, commits and releases random requests against a model of the device's memory (block id ->
what the engine wrote into each slot), so a prefix hit that points at the wrong K/V is seen."""

from dataclasses import dataclass

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from paddle_xla.errors import GenerationError
from paddle_xla.generation.blocks import Admission, BlockPool

# ---- unit cases


def _admit(pool, seq, prompt, total):
    admission = pool.admit(seq, prompt, total)
    assert admission is not None, f"{seq!r} did not fit"
    pool.check()
    return admission


def _serve(pool, seq, prompt, total):
    """Admit, prefill (commit) and finish a request: its full prompt blocks stay cached."""
    admission = _admit(pool, seq, prompt, total)
    pool.commit_prompt(seq)
    pool.release(seq)
    pool.check()
    return admission


def test_a_shared_three_block_prefix_is_hit():
    pool = BlockPool(num_blocks=20, block_size=4)
    prefix = list(range(12))
    first = _admit(pool, "a", [*prefix, 50, 51], 20)
    assert first.hit_tokens == 0 and len(first.table) == 5
    # NOTE: before its prompt is committed, nothing of it can be hit (its K/V may not be written yet)
    assert pool.prefix_hits([*prefix, 60]) == ()
    pool.commit_prompt("a")
    pool.check()
    second = _admit(pool, "b", [*prefix, 60, 61, 62], 18)
    assert second.hit_tokens == 12
    assert second.table[:3] == first.table[:3] and not set(second.table[3:]) & set(first.table)
    assert pool.used_blocks == 5 + 2 and pool.cached_blocks == 3
    assert pool.stats.queried_tokens == 14 + 15 and pool.stats.hit_tokens_total == 12
    assert pool.stats.hit_rate == pytest.approx(12 / 29)


def test_only_full_blocks_before_the_prompts_last_token_are_hit():
    pool = BlockPool(num_blocks=20, block_size=4)
    cached = _serve(pool, "a", list(range(8)), 8)
    assert pool.cached_blocks == 2  # NOTE: both full prompt blocks are registered, the last one too
    # the same two full blocks: the last token must be prefilled, so only the first block is a hit
    assert _admit(pool, "b", list(range(8)), 10).hit_tokens == 4
    assert _admit(pool, "c", [*range(8), 9], 10) == Admission(cached.table[:2] + pool.table("c")[2:], 8)
    assert _admit(pool, "d", [0, 1, 2, 3, 4, 5, 6], 7).hit_tokens == 4  # a partial block is never a hit
    assert _admit(pool, "e", [0, 1, 2, 9, 4, 5, 6, 7, 8], 9).hit_tokens == 0  # the first block differs


def test_a_block_is_hit_only_at_its_place_after_the_same_earlier_blocks():
    pool = BlockPool(num_blocks=20, block_size=2)
    _serve(pool, "a", [1, 2, 3, 4, 5], 5)
    # NOTE: a's second block holds (3, 4) too, but its K/V are those of 3, 4 after 1, 2: no hit
    assert _admit(pool, "b", [3, 4, 3, 4, 5], 5).hit_tokens == 0
    assert _admit(pool, "c", [9, 9, 3, 4, 5], 5).hit_tokens == 0
    assert _admit(pool, "d", [1, 2, 3, 4, 6], 5).hit_tokens == 4


def test_the_least_recently_released_cached_block_is_evicted_first():
    pool = BlockPool(num_blocks=4, block_size=2)  # 3 usable blocks
    a = _serve(pool, "a", [1, 1, 5], 3)
    b = _serve(pool, "b", [2, 2, 5], 3)
    assert pool.cached_blocks == 2 and pool.free_blocks == 3 and pool.used_blocks == 0
    # two blocks: the one truly free block, then the least recently released cached one (a's)
    c = _admit(pool, "c", [3, 3, 5], 3)
    assert a.table[0] in c.table and b.table[0] not in c.table
    assert pool.prefix_hits([1, 1, 5]) == () and pool.prefix_hits([2, 2, 5]) == (b.table[0],)


def test_a_hit_cached_block_is_in_use_again_and_not_evicted():
    pool = BlockPool(num_blocks=5, block_size=2)  # 4 usable blocks
    a = _serve(pool, "a", [1, 1, 5], 3)
    b = _serve(pool, "b", [2, 2, 5], 3)
    again = _admit(pool, "a2", [1, 1, 7], 3)  # NOTE: hits a's block, the least recently released
    assert again.table[0] == a.table[0] and again.hit_tokens == 2
    c = _admit(pool, "c", [3, 3, 5], 4)  # takes the one free block, then must evict: b's, not a's
    assert b.table[0] in c.table and a.table[0] not in c.table
    assert pool.prefix_hits([1, 1, 5]) == (a.table[0],)


def test_a_hit_block_waiting_in_the_lru_is_not_counted_as_evictable_for_its_own_admission():
    pool = BlockPool(num_blocks=4, block_size=2)  # 3 usable blocks
    _serve(pool, "a", [1, 1, 5], 4)  # cached: a's first block; free: the two others
    _admit(pool, "other", [7], 1)  # now 1 free + 1 cached
    assert pool.free_blocks == 2
    # 3 blocks, 1 of them a hit: the 2 fresh ones cannot include the hit block itself
    assert pool.admit("b", [1, 1, 5], 6) is None
    pool.check()
    pool.release("other")
    assert _admit(pool, "b", [1, 1, 5], 6).hit_tokens == 2
    assert pool.free_blocks == 0


def test_an_equal_prefix_committed_twice_keeps_the_first_block():
    pool = BlockPool(num_blocks=10, block_size=2)
    a = _admit(pool, "a", [1, 2, 3], 3)
    b = _admit(pool, "b", [1, 2, 4], 3)  # admitted before a's commit: no hit, its own copy
    assert b.hit_tokens == 0
    pool.commit_prompt("a")
    pool.commit_prompt("b")
    pool.check()
    assert pool.cached_blocks == 1 and pool.prefix_hits([1, 2, 9]) == (a.table[0],)
    pool.release("a")
    pool.release("b")
    pool.check()
    assert pool.cached_blocks == 1 and pool.free_blocks == 9


def test_hits_and_registrations_come_in_whole_granules():
    pool = BlockPool(num_blocks=20, block_size=2, granule=2)
    pool.admit("a", list(range(7)), 8)  # 3 full blocks: only the first granule (2 blocks) is registered
    pool.commit_prompt("a")
    assert pool.cached_blocks == 2
    assert pool.prefix_hits(list(range(9))) == pool.table("a")[:2]
    assert pool.prefix_hits(list(range(4))) == ()  # NOTE: the last token is always prefilled: 1 block < a granule
    pool.release("a")
    pool.check()


def test_without_the_prefix_cache_nothing_is_hit():
    pool = BlockPool(num_blocks=20, block_size=2, prefix_cache=False)
    _serve(pool, "a", [1, 2, 3, 4, 5], 8)
    assert pool.cached_blocks == 0 and pool.free_blocks == 19
    assert _admit(pool, "b", [1, 2, 3, 4, 5], 8).hit_tokens == 0
    assert pool.stats.hit_rate == 0.0


def test_a_request_that_can_never_fit_is_refused_with_the_fix():
    pool = BlockPool(num_blocks=41, block_size=16)
    message = (
        "a request of 900 tokens needs 57 blocks of 16 tokens; the KV cache holds 40 blocks (640 tokens): "
        "raise --kv-cache-tokens or lower max_tokens"
    )
    with pytest.raises(GenerationError) as info:
        pool.admit(0, [1] * 100, 900)
    assert str(info.value) == message
    assert pool.capacity_tokens == 640 and pool.free_blocks == 40
    assert _admit(pool, 1, [1] * 100, 640).table == tuple(range(1, 41))  # exactly the whole pool fits


def test_admit_waits_while_full_and_succeeds_after_a_release():
    pool = BlockPool(num_blocks=5, block_size=4)
    _admit(pool, 1, [1, 2, 3], 8)
    _admit(pool, 2, [4, 5, 6], 8)
    assert pool.free_blocks == 0 and pool.used_blocks == 4
    assert pool.admit(3, [7], 2) is None
    assert 3 not in pool and pool.stats.queried_tokens == 6  # NOTE: a refused admission is not counted
    pool.release(1)
    pool.check()
    assert _admit(pool, 3, [7], 2).table in {(1,), (2,)}


def test_bad_arguments_are_refused():
    with pytest.raises(GenerationError, match="block 0 is reserved"):
        BlockPool(num_blocks=1, block_size=4)
    with pytest.raises(GenerationError, match="block_size=0"):
        BlockPool(num_blocks=8, block_size=0)
    pool = BlockPool(num_blocks=8, block_size=4)
    with pytest.raises(ValueError, match="empty"):
        pool.admit(1, [], 4)
    with pytest.raises(ValueError, match="less than the prompt"):
        pool.admit(1, [1, 2, 3], 2)
    _admit(pool, 1, [1, 2, 3], 4)
    with pytest.raises(ValueError, match="already admitted"):
        pool.admit(1, [1], 1)
    with pytest.raises(KeyError):
        pool.release(2)
    pool.release(1)
    with pytest.raises(KeyError):
        pool.release(1)
    pool.check()
    assert pool.free_blocks == 7 and pool.blocks_for(0) == 0 and pool.blocks_for(9) == 3


# ---- the state machine

TOKENS = st.integers(0, 2)  # NOTE: a tiny alphabet, so that random prompts share blocks too
SHARED_PREFIXES = (
    (1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2),
    (1, 2, 1, 2, 0, 0, 0, 0, 0, 0),
    (0, 0, 0, 0, 0, 0, 0, 0),
    (2, 1, 0, 2, 1, 0, 2, 1, 0),
)


@st.composite
def prompts(draw):
    prefix = draw(st.sampled_from(SHARED_PREFIXES))
    head = prefix[: draw(st.integers(0, len(prefix)))]
    tail = draw(st.lists(TOKENS, min_size=0 if head else 1, max_size=4))
    return (*head, *tail)


@dataclass
class Live:
    tokens: tuple[int, ...]  # all it will ever hold: the prompt, then its own generated tokens
    committed: bool = False


class BlockPoolMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.pool = None
        self.live: dict[int, Live] = {}
        self.memory: dict[int, list[tuple[int, ...] | None]] = {}  # block id -> what the engine wrote into its slots
        self.next_seq = 0

    # NOTE: pools of a few requests: they fill up and evict, and the longest requests can never fit
    @initialize(
        num_blocks=st.integers(4, 24),
        block_size=st.integers(1, 3),
        prefix_cache=st.booleans(),
        granule=st.integers(1, 2),
    )
    def make_pool(self, num_blocks, block_size, prefix_cache, granule):
        self.pool = BlockPool(num_blocks, block_size, prefix_cache, granule)

    def _holders(self, block):
        return [seq for seq in self.live if block in self.pool.table(seq)]

    @rule(prompt=prompts(), new_tokens=st.integers(0, 8), prefill_now=st.booleans(), cacheable=st.booleans())
    def admit(self, prompt, new_tokens, prefill_now, cacheable):
        pool, bs = self.pool, self.pool.block_size
        seq, total = self.next_seq, len(prompt) + new_tokens
        self.next_seq += 1
        needed = pool.blocks_for(total)
        if needed > pool.num_blocks - 1:
            with pytest.raises(GenerationError, match="raise --kv-cache-tokens"):
                pool.admit(seq, prompt, total, cacheable)
            event("admit: can never fit")
            return
        hits = pool.prefix_hits(prompt) if cacheable else ()
        back_from_lru = sum(1 for block in hits if not self._holders(block))
        allocatable = pool.free_blocks - back_from_lru
        cached_before = pool.cached_blocks
        admission = pool.admit(seq, prompt, total, cacheable)
        if needed - len(hits) > allocatable:
            assert admission is None
            event("admit: waits (full)")
            return
        # NOTE: the statistics (pytest --hypothesis-show-statistics) show that the cases below really happen
        event(f"admit: {'hits' if hits else 'no hit'}{', evicts' if pool.cached_blocks < cached_before else ''}")
        assert admission is not None
        assert len(admission.table) == needed and admission.table[: len(hits)] == hits
        assert admission.hit_tokens == len(hits) * bs <= len(prompt) - 1
        assert pool.prefix_cache or not hits
        assert len(hits) % pool.granule == 0
        assert pool.free_blocks == allocatable - (needed - len(hits))
        generated = tuple(1000 + seq for _ in range(new_tokens))  # NOTE: tokens no prompt has
        self.live[seq] = Live(prompt + generated)
        self._engine_writes(seq, admission)
        if prefill_now:  # NOTE: else a later commit rule does it, with other admissions in between
            pool.commit_prompt(seq)
            self.live[seq].committed = True

    def _engine_writes(self, seq, admission):
        """What the engine does: prefill past the hits, then decode, into the sequence's own blocks only. A slot's
        K/V is a function of its token and of every token before it: the model writes that whole prefix."""
        bs, tokens = self.pool.block_size, self.live[seq].tokens
        for position in range(admission.hit_tokens):
            block = admission.table[position // bs]
            assert self.memory[block][position % bs] == tokens[: position + 1], "a hit points at other K/V"
        for position in range(admission.hit_tokens, len(tokens)):
            block = admission.table[position // bs]
            assert self._holders(block) == [seq], f"block {block} is written by {seq} but shared"
            self.memory.setdefault(block, [None] * bs)[position % bs] = tokens[: position + 1]

    def _pick(self, data, committed=None):
        seqs = [seq for seq, live in self.live.items() if committed is None or live.committed == committed]
        return data.draw(st.sampled_from(seqs))

    @precondition(lambda self: any(not live.committed for live in self.live.values()))
    @rule(data=st.data())
    def commit(self, data):
        seq = self._pick(data, committed=False)
        self.pool.commit_prompt(seq)
        self.live[seq].committed = True

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def release(self, data):
        seq = self._pick(data)  # NOTE: committed or not: an uncommitted one is a cancelled prefill
        self.pool.release(seq)
        del self.live[seq]

    @rule()
    def release_unknown(self):
        with pytest.raises(KeyError):
            self.pool.release(-1)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def admit_twice(self, data):
        seq = self._pick(data)
        with pytest.raises(ValueError, match="already admitted"):
            self.pool.admit(seq, (0,), 1)

    @invariant()
    def consistent(self):
        pool = self.pool
        pool.check()
        held = set()
        for seq, live in self.live.items():
            table = pool.table(seq)
            held |= set(table)
            # NOTE: every token a live sequence will read is its own, even in blocks it shares
            for p in range(len(live.tokens)):
                written = self.memory[table[p // pool.block_size]][p % pool.block_size]
                assert written == live.tokens[: p + 1], f"sequence {seq}'s position {p} holds the K/V of {written}"
        assert pool.used_blocks == len(held)
        assert pool.free_blocks == pool.num_blocks - 1 - len(held)
        assert pool.cached_blocks <= pool.num_blocks - 1

    def teardown(self):
        if self.pool is None:
            return
        for seq in list(self.live):
            self.pool.release(seq)
        self.pool.check()
        assert self.pool.used_blocks == 0 and self.pool.free_blocks == self.pool.num_blocks - 1


# NOTE: derandomized like the differential fuzzer (CI replays the same stream), and bounded to a few seconds
BlockPoolMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, derandomize=True, database=None
)
test_block_pool_state_machine = BlockPoolMachine.TestCase
