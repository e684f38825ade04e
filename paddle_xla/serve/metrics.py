"""The server's Prometheus metrics, in a registry of its own (so that two servers in one process, as
in tests, never share counts). Model labels are only names from the repository scan: a request for
an unknown name is counted as "_unknown", so clients cannot grow the label set."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST  # noqa: F401  (app.py's content type)

UNKNOWN_MODEL = "_unknown"
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "paddle_xla_requests", "Inference requests by model and HTTP status code.", ["model", "code"], registry=r
        )
        self.latency = Histogram(
            "paddle_xla_request_latency_seconds",
            "Inference request time, body read to answer.",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.compute = Histogram(
            "paddle_xla_compute_seconds",
            "Time of one model call (one batch).",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_rows = Histogram(
            "paddle_xla_batch_rows",
            "Rows of real requests in one executed batch.",
            ["model"],
            buckets=_ROW_BUCKETS,
            registry=r,
        )
        self.batch_padded = Histogram(
            "paddle_xla_batch_padded_rows",
            "Rows of one executed batch after padding.",
            ["model"],
            buckets=_ROW_BUCKETS,
            registry=r,
        )
        self.batch_requests = Histogram(
            "paddle_xla_batch_requests",
            "Requests combined into one executed batch.",
            ["model"],
            buckets=_ROW_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "paddle_xla_queue_depth", "Requests waiting for their model's worker.", ["model"], registry=r
        )
        self.slots_busy = Gauge(
            "paddle_xla_llm_slots_busy",
            "Rows of a language model's decode batch that hold a request.",
            ["model"],
            registry=r,
        )
        self.slots_waiting = Gauge(
            "paddle_xla_llm_waiting", "Language-model requests waiting for a free row.", ["model"], registry=r
        )
        self.kv_free = Gauge(
            "paddle_xla_llm_kv_slots_free",
            "KV-cache slots (rows x positions) not holding a running request's tokens.",
            ["model"],
            registry=r,
        )
        self.kv_blocks_free = Gauge(
            "paddle_xla_llm_kv_blocks_free",
            "Blocks of a paged KV cache no running request holds (0 without one).",
            ["model"],
            registry=r,
        )
        self.kv_blocks_used = Gauge(
            "paddle_xla_llm_kv_blocks_used", "Blocks of a paged KV cache running requests hold.", ["model"], registry=r
        )
        self.prefix_hit_tokens = Counter(
            "paddle_xla_llm_prefix_cache_hit_tokens",
            "Prompt tokens whose K/V a request took from the prefix cache instead of prefilling them.",
            ["model"],
            registry=r,
        )
        self.prefix_hit_rate = Gauge(
            "paddle_xla_llm_prefix_cache_hit_rate",
            "Of the prompt tokens admitted since start, the share the prefix cache held (0 without one).",
            ["model"],
            registry=r,
        )
        self.bucket_rows = Histogram(
            "paddle_xla_llm_decode_bucket_rows",
            "Rows of the bucket a decode chunk of a paged KV cache ran in.",
            ["model"],
            buckets=_ROW_BUCKETS,
            registry=r,
        )
        self.bucket_blocks = Histogram(
            "paddle_xla_llm_decode_bucket_blocks",
            "Cache blocks per row of the bucket a decode chunk of a paged KV cache ran in.",
            ["model"],
            buckets=_ROW_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "paddle_xla_llm_time_to_first_token_seconds",
            "From a request's admission to the queue to its first token.",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "paddle_xla_llm_inter_token_seconds",
            "Between a request's successive token batches (one per decode chunk).",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.prefill = Histogram(
            "paddle_xla_llm_prefill_seconds",
            "One prefill step: a prompt within a bucket whole, or one prefill_chunk of a longer one's tokens.",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.decode = Histogram(
            "paddle_xla_llm_decode_chunk_seconds",
            "One decode chunk of the whole batch.",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens_in = Counter(
            "paddle_xla_llm_prompt_tokens",
            "Prompt tokens prefilled (prefix-cache hits not counted).",
            ["model"],
            registry=r,
        )
        self.tokens_out = Counter("paddle_xla_llm_generated_tokens", "Tokens generated.", ["model"], registry=r)
        self.spec_steps = Counter(
            "paddle_xla_llm_spec_verify_steps",
            "Speculative decoding: rounds run, one per live row and round (a row without a guess takes a plain "
            "decode step).",
            ["model", "method"],
            registry=r,
        )
        self.spec_guessed = Counter(
            "paddle_xla_llm_spec_draft_tokens", "Speculative decoding: tokens guessed.", ["model", "method"], registry=r
        )
        self.spec_accepted = Counter(
            "paddle_xla_llm_spec_accepted_tokens",
            "Speculative decoding: guessed tokens the target kept.",
            ["model", "method"],
            registry=r,
        )
        self.spec_per_step = Gauge(
            "paddle_xla_llm_spec_accepted_per_step",
            "Speculative decoding: guessed tokens kept per verify step since start (each step also makes one of "
            "its own).",
            ["model", "method"],
            registry=r,
        )
        self.spec_rate = Gauge(
            "paddle_xla_llm_spec_acceptance_rate",
            "Speculative decoding: of the tokens guessed since start, the share kept.",
            ["model", "method"],
            registry=r,
        )
        self.late_compiles = Counter(
            "paddle_xla_compiles_after_ready",
            "Programs JAX lowered after the server said ready: each one a request waited for (warm-up compiles "
            "every bucket, so the aim is 0).",
            registry=r,
        )

    def llm(self, model: str) -> LlmMetrics:
        return LlmMetrics(
            *(
                m.labels(model)
                for m in (
                    self.slots_busy,
                    self.slots_waiting,
                    self.kv_free,
                    self.kv_blocks_free,
                    self.kv_blocks_used,
                    self.prefix_hit_tokens,
                    self.prefix_hit_rate,
                    self.bucket_rows,
                    self.bucket_blocks,
                    self.ttft,
                    self.itl,
                    self.prefill,
                    self.decode,
                    self.tokens_in,
                    self.tokens_out,
                )
            )
        )

    def speculation(self, model: str, method: str) -> SpecMetrics:
        return SpecMetrics(
            *(
                m.labels(model, method)
                for m in (self.spec_steps, self.spec_guessed, self.spec_accepted, self.spec_per_step, self.spec_rate)
            )
        )

    def text(self) -> bytes:
        return generate_latest(self.registry)


@dataclass(frozen=True)
class LlmMetrics:
    """One served language model's series (labelled children), as its scheduler updates them."""

    busy: Any
    waiting: Any
    kv_free: Any
    kv_blocks_free: Any
    kv_blocks_used: Any
    prefix_hit_tokens: Any
    prefix_hit_rate: Any
    bucket_rows: Any
    bucket_blocks: Any
    ttft: Any
    itl: Any
    prefill: Any
    decode: Any
    tokens_in: Any
    tokens_out: Any


@dataclass
class SpecMetrics:
    """A speculating model's series, set from its engine's counts (generation/speculative/engine.py's
    SpeculativeStats) after each decode chunk."""

    steps: Any
    guessed: Any
    accepted: Any
    per_step: Any
    rate: Any
    seen: tuple[int, int, int] = (0, 0, 0)  # NOTE: the counts already added to the counters

    def update(self, stats) -> None:
        now = (stats.verify_steps, stats.guessed_tokens, stats.accepted_tokens)
        for counter, new, old in zip((self.steps, self.guessed, self.accepted), now, self.seen):
            if new > old:
                counter.inc(new - old)
        self.seen = now
        self.per_step.set(stats.accepted_per_step)
        self.rate.set(stats.acceptance_rate)
