"""The server's settings, as the CLI's flags give them, checked once at start-up.

Each field is written once, here: its default, and with it (`flag(...)`) its `paddle-xla serve` flag's
help text and how the flag differs from a plain --field-name option. cli/main.py builds the serve
command's options from `Settings.flags()` and the Settings from their values (`Settings.from_flags`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Optional


@dataclasses.dataclass(frozen=True)
class Flag:
    """How one Settings field is given on the command line."""

    name: str  # the field
    default: Any  # the field's default
    help: str
    # "value" | "sizes": the text '1,2,4' -> a tuple | "negated": --no-NAME sets NAME False
    kind: str = "value"
    decls: tuple[str, ...] = ()  # the flag's names, when not --field-name
    envvar: str | None = None
    show_default: bool = True

    @property
    def param(self) -> str:
        """The serve command's parameter name."""
        return f"no_{self.name}" if self.kind == "negated" else self.name

    @property
    def cli_default(self) -> Any:
        return {"negated": not self.default, "sizes": None}.get(self.kind, self.default)

    @property
    def cli_type(self) -> Any:
        if self.kind == "negated":
            return bool
        # NOTE: a value typer reads as the flag's type (it knows typing.Optional)
        return Optional[str] if self.kind == "sizes" or self.default is None else type(self.default)  # noqa: UP045

    def value(self, given: Any) -> Any:
        """The field's value from the flag's."""
        if self.kind == "negated":
            return not given
        if self.kind == "sizes":
            return parse_sizes(given, "--" + self.name.replace("_", "-"))
        return given if given or self.default is not None else None


def flag(default: Any, help: str, **how: Any) -> Any:
    """A Settings field with its CLI flag (Flag's fields other than name and default)."""
    return dataclasses.field(default=default, metadata={"flag": how | {"help": help}})


@dataclasses.dataclass(frozen=True)
class Settings:
    host: str = flag("127.0.0.1", "address to bind (0.0.0.0: reachable from other machines)")
    port: int = flag(8000, "0: a free port (the 'listening on' line says which)")
    # rows (the sum of the requests' batch dims) in one call
    max_batch_size: int = flag(
        16, "most rows in one model call; larger requests are refused (400); a checkpoint folder's generator rows"
    )
    max_queue_delay_us: int = flag(
        2000,
        "how long a batch waits for company, from its first request or the previous call's end, whichever is later",
    )
    # () -> powers of two up to max_batch_size
    preferred_batch_sizes: tuple[int, ...] = flag(
        (),
        "batch sizes calls are padded up to, e.g. 4,8,16 (default: powers of two; --max-batch-size is always one)",
        kind="sizes",
    )
    # lengths free non-batch dims are padded up to; () -> none
    seq_buckets: tuple[int, ...] = flag(
        (),
        "pad free non-batch dims (sequence lengths) with zeros up to these, e.g. 32,64,128; only for models "
        "that mask padding (attention masks)",
        kind="sizes",
    )
    batching: bool = flag(True, "run each request alone", kind="negated", decls=("--no-batching",))
    # run a batch as the calls warm-up measured cheapest (plan.py)
    split_batches: bool = flag(
        True,
        "run a batch as several smaller calls where warm-up timed them cheaper per "
        "row (e.g. 32 rows as 4 x 8 on a small CPU)",
        decls=("--split-batches/--no-split-batches",),
    )
    kv_cache_tokens: int = flag(
        0,
        "language models: KV cache slots, shared in blocks of 16 by the running requests (0: the generator's "
        "max_batch_size x max_length)",
    )
    kv_cache_memory: float = flag(
        0.0,
        "language models: the KV cache as this fraction of the device memory left once the weights are on it "
        "(0 < F < 1; the device must report its memory, as GPUs do; instead of --kv-cache-tokens)",
    )
    paged_kv_cache: bool = flag(
        True,
        "language models: give each running request a row of max_length slots instead of cache blocks",
        kind="negated",
        decls=("--no-paged-kv-cache",),
    )
    max_prefill_tokens: int = flag(
        0,
        "language models: prompt tokens prefilled beside one decode chunk while requests run (0: the "
        "generator's prefill_chunk); more lets short requests in faster and holds running streams up longer",
    )
    prefix_cache: bool = flag(
        True,
        "language models: prefill every prompt from its first token (by default a prompt whose first "
        "prefill chunks are cached from an earlier request reuses their KV blocks)",
        kind="negated",
        decls=("--no-prefix-cache",),
    )
    batch_invariance: bool = flag(
        True,
        "language models: let a lone request's decode chunks run one row (faster for one client; a row's "
        "float32 rounding then depends on how many rows share its chunk)",
        kind="negated",
        decls=("--no-batch-invariance",),
    )
    max_model_len: int = flag(
        0,
        "checkpoint folders: the longest prompt plus completion (0: the model's max_position_embeddings, at most 4096)",
    )
    dtype: str = flag("auto", "checkpoint folders: auto (the checkpoint's own) | float32 | bfloat16 | float16")
    speculative_config: str = flag(
        "",
        "checkpoint folders: speculative decoding by prompt lookup, vLLM's JSON, e.g. "
        '\'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}\' (an artifact speculates as '
        "exported)",
    )
    tool_call_parser: str | None = flag(
        None,
        "language models: how to read tool calls out of a chat reply for tool_choice 'auto': hermes (Qwen, "
        "Hermes: <tool_call> tags) | llama3_json (Llama 3.x JSON); without it 'auto' is refused",
        show_default=False,
    )
    max_queue_size: int = flag(256, "queued requests per model; more are refused with 503")
    request_timeout_ms: int = flag(60_000, "answer 504 after this long (0: never)")
    max_body_mb: float = flag(64.0, "larger request bodies get 413")
    body_timeout_s: float = flag(30.0, "a request body not all received by then gets 408")
    token: str | None = flag(
        None,
        "require 'Authorization: Bearer TOKEN' (all but health)",
        envvar="PADDLE_XLA_SERVE_TOKEN",
        show_default=False,
    )

    @classmethod
    def flags(cls) -> list[Flag]:
        """The CLI flag of each field, in field order."""
        return [Flag(f.name, f.default, **f.metadata["flag"]) for f in dataclasses.fields(cls)]

    @classmethod
    def from_flags(cls, **given: Any) -> Settings:
        """Settings from the serve command's flag values, keyed by Flag.param."""
        return cls(**{f.name: f.value(given[f.param]) for f in cls.flags()})

    def __post_init__(self):
        for name in ("max_batch_size", "max_queue_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(self, name)}.")
        for name in ("max_queue_delay_us", "request_timeout_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be 0 or more, not {getattr(self, name)}.")
        if self.max_model_len < 0:
            raise ValueError(f"--max-model-len must be 0 or more, not {self.max_model_len}.")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"--dtype takes auto, float32, bfloat16 or float16, not {self.dtype!r}.")
        if self.tool_call_parser not in (None, "hermes", "llama3_json"):
            raise ValueError(f"--tool-call-parser takes hermes or llama3_json, not {self.tool_call_parser!r}.")
        if self.max_prefill_tokens < 0:
            raise ValueError(f"--max-prefill-tokens must be 0 or more, not {self.max_prefill_tokens}.")
        if self.kv_cache_tokens < 0:
            raise ValueError(f"--kv-cache-tokens must be 0 or more, not {self.kv_cache_tokens}.")
        if not 0 <= self.kv_cache_memory < 1:
            raise ValueError(
                f"--kv-cache-memory is a fraction of the device's memory: 0 < F < 1, not {self.kv_cache_memory}."
            )
        if self.kv_cache_memory and self.kv_cache_tokens:
            raise ValueError("give the KV cache's size once: --kv-cache-tokens or --kv-cache-memory, not both.")
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
