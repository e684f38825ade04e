"""OpenAI request bodies (`/v1/completions`, `/v1/chat/completions`) read and checked: every field's type
and range, named in a 400 when wrong. Paddle-free.

Meanings follow OpenAI's API: temperature 0 is greedy decoding, above 0 sampling at that temperature;
`max_tokens` defaults to 16 for completions and to the room the context leaves for chat; `n` is 1-128 (and
completions' `best_of` n-20);
`logprobs` is an integer 0-5 for completions, `logprobs: true` with `top_logprobs` 0-20 for chat; a
completion's `echo` puts the prompt first (with `max_tokens` 0: the prompt alone, scored where `logprobs`).
vLLM's extensions `top_k`, `repetition_penalty`, `min_tokens`, `include_stop_str_in_output`, `stop_token_ids`
and `ignore_eos` are accepted too. A field the API has but paddle_xla does not implement (penalties other than 0,
`logit_bias`, `suffix`) is refused by name rather than ignored, so a client never gets an answer to a
question it did not ask."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from ..request_errors import RequestError

ROLES = ("system", "developer", "user", "assistant", "tool")
COMPLETION_DEFAULT_MAX_TOKENS = 16
COMPLETION_MAX_LOGPROBS = 5  # NOTE: OpenAI's limits; the engine keeps TOP_LOGPROBS = 20 alternatives
CHAT_MAX_TOP_LOGPROBS = 20
MAX_N = 128
MAX_BEST_OF = 20


@dataclass(frozen=True)
class Sampling:
    max_tokens: int | None
    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float
    min_tokens: int
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    include_stop_str: bool = False  # vLLM's include_stop_str_in_output: the text keeps the stop string
    logprobs: int | None = None  # None: not asked; else the most likely alternatives wanted per token
    echo: bool = False  # completions: the prompt comes first in the text (and its tokens in logprobs)
    n: int = 1  # choices returned
    best_of: int = 1  # choices made (completions: the n best of them are returned)
    stop_token_ids: tuple[int, ...] = ()  # vLLM's: any of these ends the completion (it stays in the text)
    ignore_eos: bool = False  # vLLM's: the model's EOS does not end the completion


@dataclass(frozen=True)
class Parsed:
    model: str
    prompt: str | tuple[int, ...] | None  # completions: text or token ids
    messages: tuple[dict, ...] | None  # chat: role/content pairs
    sampling: Sampling
    template_args: dict = dataclasses.field(default_factory=dict)  # chat: what else the template receives


def bad(message: str, param: str | None = None) -> RequestError:
    error = RequestError(400, message)
    error.param = param
    return error


def body_json(body: bytes) -> dict:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise bad(f"The request body is not valid JSON ({e}); send a JSON object.") from None
    if not isinstance(data, dict):
        raise bad(f"The request body must be a JSON object, not {type(data).__name__}.")
    return data


def _typed(data: dict, name: str, kinds: tuple, default: Any, what: str) -> Any:
    value = data.get(name, default)
    if value is None:
        return default
    # NOTE: bool is an int in Python, never in JSON's sense of a number
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise bad(f"'{name}' must be {what}, got {json.dumps(value)[:60]}.", name)
    return value


def _number(data, name, default, low=None, high=None, low_open=False):
    value = _typed(data, name, (int, float), default, "a number")
    if value is None:
        return None
    if low is not None and (value <= low if low_open else value < low) or high is not None and value > high:
        span = f"{'(' if low_open else '['}{low}, {high if high is not None else 'inf'}]"
        raise bad(f"'{name}' must lie in {span}, got {value}.", name)
    return value


def _integer(data, name, default, low=None):
    value = _typed(data, name, (int,), default, "an integer")
    if value is not None and low is not None and value < low:
        raise bad(f"'{name}' must be at least {low}, got {value}.", name)
    return value


def _same(value, allowed) -> bool:
    """JSON equality: true is no 1 and 0 no false (Python's == says they are), 0 and 0.0 are one number."""
    if isinstance(value, bool) or isinstance(allowed, bool):
        return isinstance(value, bool) and isinstance(allowed, bool) and value == allowed
    return type(value) is type(allowed) and value == allowed or _numbers(value, allowed) and value == allowed


def _numbers(*values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _fixed(data: dict, name: str, allowed: tuple) -> None:
    if name in data and not any(_same(data[name], a) for a in allowed):
        raise bad(
            f"'{name}'={json.dumps(data[name])[:40]} is not supported by this server (it takes "
            f"{' or '.join(json.dumps(a) for a in allowed)}).",
            name,
        )


def _stop(data: dict) -> tuple[str, ...]:
    stop = data.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= 4:
        return tuple(stop)
    raise bad("'stop' must be a string or a list of up to 4 strings.", "stop")


COMMON = {
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "min_tokens",
    "include_stop_str_in_output",
    "stop_token_ids",
    "ignore_eos",
    "seed",
    "stop",
    "n",
    "stream",
    "stream_options",
    "user",
    "logprobs",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
}
COMPLETION_FIELDS = COMMON | {"prompt", "echo", "best_of", "suffix"}
CHAT_FIELDS = COMMON | {
    "messages",
    "max_completion_tokens",
    "top_logprobs",
    "add_generation_prompt",
    "documents",
    "chat_template_kwargs",
}


def sampling(data: dict, default_max_tokens: int | None, fewest_tokens: int = 1) -> Sampling:
    for name, allowed in (
        # NOTE: null is what OpenAI's API and vLLM take as the default for each of these
        ("presence_penalty", (None, 0)),
        ("frequency_penalty", (None, 0)),
        ("logit_bias", (None, {})),
        ("suffix", (None,)),
    ):
        _fixed(data, name, allowed)
    if data.get("stream_options") is not None and data.get("stream") is not True:
        raise bad("'stream_options' is only for a streamed request: set 'stream': true, or drop it.", "stream_options")
    options = _typed(data, "stream_options", (dict,), {}, "an object")
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise bad("'stream_options.include_usage' must be true or false.", "stream_options")
    max_tokens = _integer(data, "max_tokens", None, low=fewest_tokens)
    if max_tokens is None:
        max_tokens = _integer(data, "max_completion_tokens", default_max_tokens, low=fewest_tokens)
    min_tokens = _integer(data, "min_tokens", 0, low=0)
    if max_tokens is not None and min_tokens > max_tokens:
        raise bad(
            f"'min_tokens'={min_tokens} exceeds 'max_tokens'={max_tokens}: ask for at most as many.", "min_tokens"
        )
    n = _integer(data, "n", 1, low=1)
    if n > MAX_N:
        raise bad(f"'n' must be at most {MAX_N}, got {n}.", "n")
    return Sampling(
        n=n,
        best_of=n,
        max_tokens=max_tokens,
        temperature=float(_number(data, "temperature", 1.0, 0.0, 2.0)),
        top_p=float(_number(data, "top_p", 1.0, 0.0, 1.0, low_open=True)),
        top_k=_integer(data, "top_k", 0, low=0),
        min_tokens=min_tokens,
        repetition_penalty=float(_number(data, "repetition_penalty", 1.0, 0.0, low_open=True)),
        seed=_integer(data, "seed", None),
        stop=_stop(data),
        stream=_typed(data, "stream", (bool,), False, "true or false"),
        include_usage=include_usage,
        include_stop_str=_typed(data, "include_stop_str_in_output", (bool,), False, "true or false"),
        stop_token_ids=_stop_ids(data),
        ignore_eos=_typed(data, "ignore_eos", (bool,), False, "true or false"),
    )


def _stop_ids(data: dict) -> tuple[int, ...]:
    ids = data.get("stop_token_ids")
    if ids is None:
        return ()
    if isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        return tuple(ids)
    raise bad("'stop_token_ids' must be a list of token ids (integers of 0 or more).", "stop_token_ids")


def _unknown(data: dict, known: set) -> None:
    extra = sorted(set(data) - known)
    if extra:
        raise bad(f"Unknown field(s) {extra}; this endpoint takes {sorted(known)}.", extra[0])


def with_defaults(data: dict, defaults: dict) -> dict:
    """The body with the model's own defaults (a checkpoint's generation_config.json) where it leaves a field
    out or sends null; the request's own values win."""
    return {**data, **{k: v for k, v in defaults.items() if data.get(k) is None}}


def model_name(data: dict) -> str:
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise bad("'model' must name a served model (GET /v1/models lists them).", "model")
    return model


def completion(data: dict) -> Parsed:
    _unknown(data, COMPLETION_FIELDS)
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # NOTE: a batch of one prompt
    if isinstance(prompt, str):
        if not prompt:
            raise bad("'prompt' is empty; give some text or token ids.", "prompt")
    elif isinstance(prompt, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
        if not prompt:
            raise bad("'prompt' is empty; give some text or token ids.", "prompt")
        prompt = tuple(prompt)
    else:
        raise bad("'prompt' must be a string or a list of token ids (one prompt per request).", "prompt")
    # NOTE: echo with max_tokens 0 asks for the prompt's scores alone (what evaluation harnesses send)
    echo = _typed(data, "echo", (bool,), False, "true or false")
    s = sampling(data, COMPLETION_DEFAULT_MAX_TOKENS, fewest_tokens=0 if echo else 1)
    logprobs = _integer(data, "logprobs", None, low=0)
    if logprobs is not None and logprobs > COMPLETION_MAX_LOGPROBS:
        raise bad(f"'logprobs' must be at most {COMPLETION_MAX_LOGPROBS}, got {logprobs}.", "logprobs")
    return Parsed(
        model_name(data), prompt, None, dataclasses.replace(s, logprobs=logprobs, echo=echo, best_of=_best_of(data, s))
    )


def _best_of(data: dict, s: Sampling) -> int:
    """Completions' best_of: how many choices are made (at least n, at most 20; not streamed past n)."""
    best_of = _integer(data, "best_of", s.n, low=1)
    if not s.n <= best_of <= MAX_BEST_OF:
        raise bad(f"'best_of' must lie in ['n'={s.n}, {MAX_BEST_OF}], got {best_of}.", "best_of")
    if best_of > s.n and s.stream:
        raise bad("'best_of' above 'n' cannot be streamed (the best are known at the end): drop one.", "best_of")
    return best_of


def chat(data: dict) -> Parsed:
    _unknown(data, CHAT_FIELDS)
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty list of {role, content} objects.", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad(f"messages[{i}] must be an object with 'role' and 'content'.", "messages")
        role = m.get("role")
        if role not in ROLES:
            raise bad(f"messages[{i}].role {json.dumps(role)[:40]} is not one of {list(ROLES)}.", "messages")
        if role == "tool" and not isinstance(m.get("tool_call_id"), str):
            raise bad(
                f"messages[{i}] (role 'tool') must carry 'tool_call_id', the id of the tool call it answers.",
                "messages",
            )
        out.append({"role": role, "content": _content(m.get("content"), i)})
    s = dataclasses.replace(sampling(data, None), logprobs=_top(data))
    return Parsed(model_name(data), None, tuple(out), s, _template_args(data))


def _template_args(data: dict) -> dict:
    """What the chat template receives besides the messages (vLLM's fields): add_generation_prompt (default
    true), documents, and chat_template_kwargs (e.g. enable_thinking) as variables of their own."""
    extra = _typed(data, "chat_template_kwargs", (dict,), {}, "an object")
    reserved = sorted(set(extra) & {"messages", "add_generation_prompt", "documents"})
    if reserved:
        raise bad(
            f"'chat_template_kwargs' may not set {reserved}: they are fields of their own.", "chat_template_kwargs"
        )
    documents = _typed(data, "documents", (list,), None, "a list of objects")
    if documents is not None and not all(isinstance(d, dict) for d in documents):
        raise bad("'documents' must be a list of objects.", "documents")
    args = {**extra, "add_generation_prompt": _typed(data, "add_generation_prompt", (bool,), True, "true or false")}
    return args if documents is None else {**args, "documents": documents}


def _top(data: dict) -> int | None:
    """Chat's logprobs: `logprobs: true` asks for them, `top_logprobs` (0-20, with it) for alternatives."""
    wanted = _typed(data, "logprobs", (bool,), False, "true or false")
    top = _integer(data, "top_logprobs", None, low=0)
    if top is not None and top > CHAT_MAX_TOP_LOGPROBS:
        raise bad(f"'top_logprobs' must be at most {CHAT_MAX_TOP_LOGPROBS}, got {top}.", "top_logprobs")
    if top is not None and not wanted:
        raise bad("'top_logprobs' needs 'logprobs': true.", "top_logprobs")
    return (top or 0) if wanted else None


def _content(content, i: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    raise bad(f"messages[{i}].content must be a string or a list of text parts.", "messages")
