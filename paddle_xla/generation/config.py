"""What a generate call asks for: PaddleFormers' arguments, their defaults and their meaning.

Names and defaults are PaddleFormers 1.2's (`generation/configuration_utils.py`), with the meanings its
`generate` gives them:
- `max_new_tokens` (default 20) counts generated tokens only. A `max_length` other than 0 stands for
  `max_new_tokens` when that is left at 20 (PaddleFormers' rule; `min_length` likewise).
- The strategy is `decode_strategy` alone: `do_sample=True` or `num_beams>1` without it stays greedy.
- `top_k` defaults to 50 and applies to sampling unless set to 0; `top_p` applies below 1.0.
- Beam search is refused: PaddleFormers runs it with per-batch Python loops on the host, and
  paddle_xla's decode loop runs on the device.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import GenerationError

STRATEGIES = ("greedy_search", "sampling")
DEFAULT_MAX_NEW_TOKENS = 20


@dataclass(frozen=True)
class DecodeConfig:
    decode_strategy: str = "greedy_search"
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    min_new_tokens: int = 0
    top_k: int = 50
    top_p: float = 1.0
    temperature: float = 1.0
    repetition_penalty: float = 1.0
    eos_token_id: tuple[int, ...] = ()  # any of these ends a row; () never ends one early
    pad_token_id: int = 0
    # NOTE: a server's rule (vLLM's min_tokens): min_new_tokens holds back every id of an eos list, which
    # row_logits does anyway; PaddleFormers' generate (and so px.generate) refuses the list
    min_new_with_eos_list: bool = False

    def __post_init__(self):
        problems = self.problems()
        if problems:
            raise GenerationError("; ".join(problems))

    def problems(self) -> list[str]:
        out = []
        if self.decode_strategy == "beam_search":
            out.append(
                "decode_strategy='beam_search' is not supported: PaddleFormers runs beam search as "
                "host-side Python loops per batch; use 'greedy_search' or 'sampling'"
            )
        elif self.decode_strategy not in STRATEGIES:
            out.append(f"decode_strategy={self.decode_strategy!r} is not one of {STRATEGIES}")
        if self.max_new_tokens < 1:
            out.append(f"max_new_tokens={self.max_new_tokens} must be at least 1")
        if self.min_new_tokens < 0:
            out.append(f"min_new_tokens={self.min_new_tokens} must be >= 0")
        if self.min_new_tokens and len(self.eos_token_id) > 1 and not self.min_new_with_eos_list:
            # NOTE: PaddleFormers' MinLengthLogitsProcessor refuses a list of eos ids too
            out.append("min_new_tokens needs a single eos_token_id, not a list")
        if self.top_k < 0:
            out.append(f"top_k={self.top_k} must be >= 0 (0 turns top-k filtering off)")
        if not 0.0 < self.top_p <= 1.0:
            out.append(f"top_p={self.top_p} must be in (0, 1]")
        if not self.temperature > 0.0:
            out.append(f"temperature={self.temperature} must be > 0")
        if not self.repetition_penalty > 0.0:
            out.append(f"repetition_penalty={self.repetition_penalty} must be > 0")
        return out

    @property
    def sampling(self) -> bool:
        return self.decode_strategy == "sampling"

    def compiled(self) -> DecodeConfig:
        """What the device loop is compiled for: everything but max_new_tokens (the loop's bound)."""
        return replace(self, max_new_tokens=DEFAULT_MAX_NEW_TOKENS)


def decode_config(base: DecodeConfig | None = None, **kwargs) -> DecodeConfig:
    """A DecodeConfig from `generate`'s keyword arguments, as PaddleFormers reads them."""
    base = base or DecodeConfig()
    beams, returns = kwargs.pop("num_beams", 1), kwargs.pop("num_return_sequences", 1)
    if beams > 1 and kwargs.get("decode_strategy", base.decode_strategy) != "beam_search":
        kwargs["decode_strategy"] = "beam_search"  # NOTE: refused below, with its reason
    if returns != 1:
        raise GenerationError(f"num_return_sequences={returns} is not supported yet: repeat the prompts instead")
    unknown = sorted(set(kwargs) - set(DecodeConfig.__dataclass_fields__) - {"max_length", "min_length"})
    if unknown:
        raise GenerationError(
            f"unknown generate arguments {unknown}; known: "
            f"{sorted(DecodeConfig.__dataclass_fields__) + ['max_length', 'min_length']}"
        )
    max_length, min_length = kwargs.pop("max_length", 0), kwargs.pop("min_length", 0)
    if max_length and kwargs.get("max_new_tokens", base.max_new_tokens) == DEFAULT_MAX_NEW_TOKENS:
        kwargs["max_new_tokens"] = max_length
    if min_length and kwargs.get("min_new_tokens", base.min_new_tokens) == 0:
        kwargs["min_new_tokens"] = min_length
    if "eos_token_id" in kwargs:
        kwargs["eos_token_id"] = token_ids(kwargs["eos_token_id"])
    return replace(base, **kwargs)


def token_ids(eos) -> tuple[int, ...]:
    """An eos_token_id as PaddleFormers takes it (None, an id or a list of ids) as a tuple."""
    if eos is None:
        return ()
    if isinstance(eos, int):
        return (eos,)
    return tuple(int(i) for i in eos)
