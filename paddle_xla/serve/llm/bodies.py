"""The OpenAI request bodies as pydantic models (as vLLM and SGLang validate theirs), and a validation failure
turned into one 400 that names the field in OpenAI's words. Paddle-free.

Strict, as JSON means its types: `n: true` is no integer, `echo: 0` no boolean, `"16"` no number (an integer
is a number). A field sent as null takes its default, as OpenAI's API does. An unknown field is refused by
name; so is a field the API has whose value this server does not implement (a penalty other than 0), so a
client never gets an answer to a question it did not ask. Ranges are OpenAI's (`temperature` 0-2, `top_p`
(0, 1], `n` 1-128, completions' `logprobs` 0-5, chat's `top_logprobs` 0-20); vLLM's extensions follow vLLM.
The fields that hold structures of their own (messages, tools, response formats) are read by requests.py,
tools.py and structured.py, which name the part at fault.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..request_errors import RequestError

MAX_N = 128
COMPLETION_MAX_LOGPROBS = 5  # NOTE: OpenAI's limits; the engine keeps TOP_LOGPROBS = 20 alternatives
CHAT_MAX_TOP_LOGPROBS = 20
_STRICT = ConfigDict(extra="forbid", strict=True)


def bad(message: str, param: str | None = None) -> RequestError:
    error = RequestError(400, message)
    error.param = param
    return error


def _only(name: str, value, allowed: tuple) -> Any:
    """A field the API has, of which this server implements only `allowed` (JSON equality: 0 == 0.0)."""
    if not any(value == a and isinstance(value, bool) == isinstance(a, bool) for a in allowed):
        shown = " or ".join(json.dumps(a) for a in (None, *allowed))
        raise bad(f"'{name}'={json.dumps(value)[:40]} is not supported by this server (it takes {shown}).", name)
    return value


class StreamOptions(BaseModel):
    model_config = _STRICT
    include_usage: bool = False
    include_obfuscation: bool = True  # NOTE: OpenAI's padding of stream events against side channels: none here
    continuous_usage_stats: bool = False  # NOTE: vLLM's usage in every chunk: not implemented, so false only

    @field_validator("continuous_usage_stats")
    @classmethod
    def _no_running_usage(cls, value):
        return _only("stream_options.continuous_usage_stats", value, (False,))


class Common(BaseModel):
    """The fields both endpoints take: OpenAI's, then vLLM's extensions, then structured output's."""

    model_config = _STRICT
    model: str = Field(min_length=1)
    max_tokens: int | None = None  # NOTE: its least value (0 or 1) depends on echo: requests.sampling checks it
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=MAX_N)
    seed: int | None = None
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict | None = None
    top_k: int = Field(0, ge=0)
    repetition_penalty: float = Field(1.0, gt=0.0)
    min_tokens: int = Field(0, ge=0)
    include_stop_str_in_output: bool = False
    stop_token_ids: list[Annotated[int, Field(ge=0)]] | None = None
    ignore_eos: bool = False
    response_format: Any = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    structured_outputs: Any = None

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _no_penalty(cls, value, info):
        return _only(info.field_name, value, (0,))

    @field_validator("logit_bias")
    @classmethod
    def _no_bias(cls, value):
        return _only("logit_bias", value, ({},))


class CompletionBody(Common):
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    best_of: int | None = Field(None, ge=1)
    logprobs: int | None = Field(None, ge=0, le=COMPLETION_MAX_LOGPROBS)
    suffix: Any = None

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, value):
        return _only("suffix", value, ())


class ChatBody(Common):
    messages: Annotated[list[Any], Field(min_length=1)]
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=CHAT_MAX_TOP_LOGPROBS)
    add_generation_prompt: bool = True
    documents: list[dict] | None = None
    chat_template_kwargs: dict | None = None
    tools: Any = None
    tool_choice: Any = None
    parallel_tool_calls: bool = True


# NOTE: a field whose type is a union: pydantic reports each branch; the 400 says what the field takes
_TAKES = {
    "prompt": "'prompt' must be a string or a list of token ids (one prompt per request).",
    "stop": "'stop' must be a string or a list of up to 4 strings.",
    "stop_token_ids": "'stop_token_ids' must be a list of token ids (integers of 0 or more).",
    "messages": "'messages' must be a non-empty list of {role, content} objects.",
    "documents": "'documents' must be a list of objects.",
}
_KINDS = {
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "a list",
}


def validated(model: type[BaseModel], data: dict) -> Any:
    """`data` as `model`, null fields at their defaults; else the 400 naming the first field at fault (all
    unknown fields at once)."""
    try:
        return model.model_validate({k: v for k, v in data.items() if v is not None})
    except ValidationError as e:
        raise _refusal(model, e.errors(include_url=False)) from None


def _refusal(model: type[BaseModel], errors: list) -> RequestError:
    unknown = sorted(str(err["loc"][0]) for err in errors if err["type"] == "extra_forbidden" and len(err["loc"]) == 1)
    if unknown:
        return bad(f"Unknown field(s) {unknown}; this endpoint takes {sorted(model.model_fields)}.", unknown[0])
    err = errors[0]
    name = str(err["loc"][0])
    path = name + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"][1:])
    got = json.dumps(err.get("input"))[:60]
    if name in _TAKES:
        return bad(_TAKES[name], name)
    if err["type"] in _KINDS:
        return bad(f"'{path}' must be {_KINDS[err['type']]}, got {got}.", name)
    if err["type"] in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return bad(_range(model, name, path, err, got), name)
    if err["type"] == "missing":
        return bad(f"'{path}' is required.", name)
    return bad(f"'{path}': {err['msg']} (got {got}).", name)


def _range(model: type[BaseModel], name: str, path: str, err: dict, got: str) -> str:
    """Out of range: a number's whole interval ('temperature' must lie in [0.0, 2.0]), an integer's bound."""
    field = model.model_fields[name]
    bounds = {k: getattr(m, k) for m in field.metadata for k in ("gt", "ge", "lt", "le") if hasattr(m, k)}
    is_float = field.annotation is float
    if is_float and path == name:
        low = "(" if "gt" in bounds else "["
        span = f"{low}{bounds.get('gt', bounds.get('ge'))}, {bounds.get('le', bounds.get('lt', 'inf'))}]"
        return f"'{name}' must lie in {span}, got {got}."
    ctx = err.get("ctx", {})
    if "le" in ctx or "lt" in ctx:
        return f"'{path}' must be at most {ctx.get('le', ctx.get('lt'))}, got {got}."
    return f"'{path}' must be at least {ctx.get('ge', ctx.get('gt'))}, got {got}."
