"""OpenAI request bodies (`/v1/completions`, `/v1/chat/completions`) read into what the engine is asked: the
fields validated by bodies.py's pydantic models (each type and range, a 400 naming the field), then the rules
that tie fields together, each a 400 naming the field at fault. Paddle-free.

Meanings follow OpenAI's API: temperature 0 is greedy decoding, above 0 sampling at that temperature;
`max_tokens` defaults to 16 for completions and to the room the context leaves for chat; `n` is 1-128 (and
completions' `best_of` n-20); `logprobs` is an integer 0-5 for completions, `logprobs: true` with
`top_logprobs` 0-20 for chat; a completion's `echo` puts the prompt first (with `max_tokens` 0: the prompt
alone, scored where `logprobs`). vLLM's extensions `top_k`, `repetition_penalty`, `min_tokens`,
`include_stop_str_in_output`, `stop_token_ids` and `ignore_eos` are accepted too, and so are structured
output's fields (structured.py) and chat's tools (tools.py)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from .bodies import ChatBody, Common, CompletionBody, bad, validated
from .structured import FIELDS as STRUCTURED_FIELDS
from .structured import Structured, parse
from .tools import Tools
from .tools import parse as parse_tools

ROLES = ("system", "developer", "user", "assistant", "tool")
COMPLETION_DEFAULT_MAX_TOKENS = 16
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
    structured: Structured | None = None  # what the text must match (structured.py), None: anything


@dataclass(frozen=True)
class Parsed:
    model: str
    prompt: str | tuple[int, ...] | None  # completions: text or token ids
    messages: tuple[dict, ...] | None  # chat: role/content pairs
    sampling: Sampling
    template_args: dict = dataclasses.field(default_factory=dict)  # chat: what else the template receives
    tools: Tools | None = None  # chat: the functions it may call, and how (tools.py); None: plain text


def body_json(body: bytes) -> dict:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise bad(f"The request body is not valid JSON ({e}); send a JSON object.") from None
    if not isinstance(data, dict):
        raise bad(f"The request body must be a JSON object, not {type(data).__name__}.")
    return data


def sampling(body: Common, default_max_tokens: int | None, fewest_tokens: int = 1) -> Sampling:
    """The sampling fields of a validated body (bodies.py), with the rules that tie two fields together."""
    if body.stream_options is not None and not body.stream:
        raise bad("'stream_options' is only for a streamed request: set 'stream': true, or drop it.", "stream_options")
    max_tokens = body.max_tokens
    if max_tokens is None:
        max_tokens = getattr(body, "max_completion_tokens", None)
    name = "max_tokens" if body.max_tokens is not None else "max_completion_tokens"
    if max_tokens is not None and max_tokens < fewest_tokens:
        raise bad(f"'{name}' must be at least {fewest_tokens}, got {max_tokens}.", name)
    max_tokens = default_max_tokens if max_tokens is None else max_tokens
    if max_tokens is not None and body.min_tokens > max_tokens:
        raise bad(
            f"'min_tokens'={body.min_tokens} exceeds 'max_tokens'={max_tokens}: ask for at most as many.", "min_tokens"
        )
    return Sampling(
        n=body.n,
        best_of=body.n,
        max_tokens=max_tokens,
        temperature=float(body.temperature),
        top_p=float(body.top_p),
        top_k=body.top_k,
        min_tokens=body.min_tokens,
        repetition_penalty=float(body.repetition_penalty),
        seed=body.seed,
        stop=(body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ()),
        stream=body.stream,
        include_usage=body.stream_options is not None and body.stream_options.include_usage,
        include_stop_str=body.include_stop_str_in_output,
        stop_token_ids=tuple(body.stop_token_ids or ()),
        ignore_eos=body.ignore_eos,
        structured=parse(body.model_dump(include=set(STRUCTURED_FIELDS))),
    )


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
    body = validated(CompletionBody, data)
    prompt = body.prompt
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # NOTE: a batch of one prompt
    if isinstance(prompt, list) and not all(isinstance(i, int) for i in prompt):
        raise bad("'prompt' must be a string or a list of token ids (one prompt per request).", "prompt")
    if not prompt:
        raise bad("'prompt' is empty; give some text or token ids.", "prompt")
    # NOTE: echo with max_tokens 0 asks for the prompt's scores alone (what evaluation harnesses send)
    s = sampling(body, COMPLETION_DEFAULT_MAX_TOKENS, fewest_tokens=0 if body.echo else 1)
    prompt = prompt if isinstance(prompt, str) else tuple(prompt)
    return Parsed(
        body.model,
        prompt,
        None,
        dataclasses.replace(s, logprobs=body.logprobs, echo=body.echo, best_of=_best_of(body, s)),
    )


def _best_of(body: CompletionBody, s: Sampling) -> int:
    """Completions' best_of: how many choices are made (at least n, at most 20; not streamed past n)."""
    best_of = s.n if body.best_of is None else body.best_of
    if not s.n <= best_of <= MAX_BEST_OF:
        raise bad(f"'best_of' must lie in ['n'={s.n}, {MAX_BEST_OF}], got {best_of}.", "best_of")
    if best_of > s.n and s.stream:
        raise bad("'best_of' above 'n' cannot be streamed (the best are known at the end): drop one.", "best_of")
    return best_of


def chat(data: dict, tool_parser: str | None = None) -> Parsed:
    """A chat request; `tool_parser`: the server's --tool-call-parser (tools.py), which "auto" needs."""
    body = validated(ChatBody, data)
    out = tuple(_message(m, i) for i, m in enumerate(body.messages))
    if body.top_logprobs is not None and not body.logprobs:
        raise bad("'top_logprobs' needs 'logprobs': true.", "top_logprobs")
    s = dataclasses.replace(sampling(body, None), logprobs=(body.top_logprobs or 0) if body.logprobs else None)
    tools = parse_tools(data, tool_parser)
    forced = tools.structured() if tools is not None else None
    if forced is not None:
        if s.structured is not None:
            raise bad(
                f"'{s.structured.param}' and a forced 'tool_choice' each constrain the output: send one.", "tool_choice"
            )
        s = dataclasses.replace(s, structured=forced)
    args = _template_args(body)
    if body.tools is not None:
        args["tools"] = body.tools  # NOTE: also with tool_choice "none", as vLLM renders them
    return Parsed(body.model, None, out, s, args, tools)


def _message(m, i: int) -> dict:
    """One chat message as the template receives it: role and content, an assistant's tool_calls (their
    arguments as objects, as templates render them), a tool result's tool_call_id and name."""
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
    calls = m.get("tool_calls") if role == "assistant" else None
    if calls is not None and m.get("content") is None:
        out: dict = {"role": role, "content": None}
    else:
        out = {"role": role, "content": _content(m.get("content"), i)}
    if calls is not None:
        out["tool_calls"] = _tool_calls(calls, i)
    for key in ("tool_call_id", "name"):
        if isinstance(m.get(key), str):
            out[key] = m[key]
    return out


def _tool_calls(calls, i: int) -> list[dict]:
    if not isinstance(calls, list):
        raise bad(f"messages[{i}].tool_calls must be a list of calls.", "messages")
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad(f"messages[{i}].tool_calls: each call needs 'function': {{'name', 'arguments'}}.", "messages")
        arguments = function.get("arguments", "{}")
        try:
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            raise bad(
                f"messages[{i}].tool_calls: the arguments of {function['name']!r} are not JSON.", "messages"
            ) from None
        out.append({**call, "function": {**function, "arguments": arguments}})
    return out


def _template_args(body: ChatBody) -> dict:
    """What the chat template receives besides the messages (vLLM's fields): add_generation_prompt (default
    true), documents, and chat_template_kwargs (e.g. enable_thinking) as variables of their own."""
    extra = body.chat_template_kwargs or {}
    reserved = sorted(set(extra) & {"messages", "add_generation_prompt", "documents", "tools"})
    if reserved:
        raise bad(
            f"'chat_template_kwargs' may not set {reserved}: they are fields of their own.", "chat_template_kwargs"
        )
    args = {**extra, "add_generation_prompt": body.add_generation_prompt}
    return args if body.documents is None else {**args, "documents": body.documents}


def _content(content, i: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    raise bad(f"messages[{i}].content must be a string or a list of text parts.", "messages")
