"""`speculative_config`: which guesses a generator verifies, with vLLM's and FastDeploy's key names.

    {"method": "draft_model", "model": draft, "num_speculative_tokens": 4}
    {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}

`method` defaults to "draft_model" when a `model` is given (vLLM's rule), and vLLM's older
`"model": "[ngram]"` means prompt lookup. prompt_lookup_max and _min default
to each other, and both to 5 when neither is given (vLLM's defaults). "mtp" (ERNIE 4.5's multi-token
prediction layer) is named and checked, not run yet."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import GenerationError

METHODS = ("draft_model", "ngram", "mtp")
KEYS = ("method", "model", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min")
LOOKUP_DEFAULT = 5
LOOKUP_LONGEST = 32


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str
    num_speculative_tokens: int
    model: Any = None  # draft_model: a causal LM (a paddle Layer) or a px.Generator over one
    prompt_lookup_max: int = LOOKUP_DEFAULT
    prompt_lookup_min: int = LOOKUP_DEFAULT

    def record(self) -> dict:
        """What an artifact's manifest and a report say of it (the draft model by its class)."""
        out = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        if self.method == "ngram":
            out.update(prompt_lookup_max=self.prompt_lookup_max, prompt_lookup_min=self.prompt_lookup_min)
        return out


def speculative_config(given: Mapping[str, Any] | SpeculativeConfig, max_length: int) -> SpeculativeConfig:
    """The checked config, or a GenerationError naming the key at fault and what it takes."""
    if isinstance(given, SpeculativeConfig):
        given = {**given.__dict__}
    if not isinstance(given, Mapping):
        raise GenerationError(f"speculative_config must be a dict, not {type(given).__name__}")
    unknown = sorted(set(given) - set(KEYS))
    if unknown:
        raise GenerationError(f"speculative_config has unknown keys {unknown}: it takes {list(KEYS)}")
    given = plain_spelling(given)
    method = given.get("method") or ("draft_model" if given.get("model") is not None else None)
    if method not in METHODS:
        raise GenerationError(f"speculative_config method={method!r} is not one of {list(METHODS)}")
    k = given.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise GenerationError(f"speculative_config num_speculative_tokens={k!r} must be an integer >= 1")
    if k + 1 >= max_length:
        raise GenerationError(
            f"speculative_config num_speculative_tokens={k} does not fit the cache: a verify step holds k + 1 = "
            f"{k + 1} tokens and max_length={max_length} leaves room for at most {max_length - 2}"
        )
    if method == "draft_model" and given.get("model") is None:
        raise GenerationError('speculative_config method="draft_model" needs "model": the draft causal LM')
    if method == "draft_model" and isinstance(given.get("model"), str):
        raise GenerationError(
            f'speculative_config "model": {given["model"]!r} is a name: give the draft causal LM (a paddle Layer or '
            'a px.Generator); "[ngram]" means method="ngram"'
        )
    if method != "draft_model" and given.get("model") is not None:
        raise GenerationError(f'speculative_config method={method!r} takes no "model" (only "draft_model" does)')
    lookup_keys = sorted(k for k in ("prompt_lookup_max", "prompt_lookup_min") if given.get(k) is not None)
    if method != "ngram" and lookup_keys:
        raise GenerationError(f"speculative_config {lookup_keys} apply to method='ngram', not {method!r}")
    top, low = _lookup(given.get("prompt_lookup_max"), given.get("prompt_lookup_min"))
    return SpeculativeConfig(method, k, given.get("model"), top, low)


def plain_spelling(given: Mapping[str, Any]) -> dict[str, Any]:
    """`given` with vLLM's older spellings of prompt lookup, `"model": "[ngram]"` (or "ngram") and
    `"method": "[ngram]"`, written as {"method": "ngram"} and no model (vLLM reads them so too)."""
    named = lambda v: isinstance(v, str) and v in ("ngram", "[ngram]")  # noqa: E731
    out = dict(given)
    if named(out.get("model")) and (out.get("method") is None or named(out.get("method"))):
        del out["model"]
        out["method"] = "ngram"
    if out.get("method") == "[ngram]":
        out["method"] = "ngram"
    return out


def _lookup(top: Any, low: Any) -> tuple[int, int]:
    """prompt_lookup_max and _min, vLLM's way: each defaults to the other, both to 5."""
    top = low if top is None else top
    low = top if low is None else low
    top = LOOKUP_DEFAULT if top is None else top
    low = LOOKUP_DEFAULT if low is None else low
    for name, v in (("prompt_lookup_max", top), ("prompt_lookup_min", low)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise GenerationError(f"speculative_config {name}={v!r} must be an integer >= 1")
    if top > LOOKUP_LONGEST:
        # NOTE: each n of low..top is its own unrolled search over the history: compile time grows as top^2
        raise GenerationError(
            f"speculative_config prompt_lookup_max={top} exceeds {LOOKUP_LONGEST}, the longest searched"
        )
    if low > top:
        raise GenerationError(f"speculative_config prompt_lookup_min={low} exceeds prompt_lookup_max={top}")
    return top, low
