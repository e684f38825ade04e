"""Tool calling on chat completions: OpenAI's `tools`, `tool_choice` and `parallel_tool_calls`, and the
assistant's `tool_calls` in its reply. Paddle-free.

The chat template receives the tools (as vLLM passes them), so a template that renders them (Llama 3.x,
Qwen, ERNIE) shows the model their schemas. Then, by `tool_choice`:
- `"none"`: plain text.
- a named function (`{"type": "function", "function": {"name": ...}}`): the text is constrained to that
  function's `parameters` schema (structured.py) and becomes its call's `arguments`.
- `"required"`: the text is constrained to a JSON array of one or more `{"name", "parameters"}` calls of
  the declared tools (one, when `parallel_tool_calls` is false), and each becomes a call.
- `"auto"` (the default once tools are given): the model writes as it was trained to, and the server's
  `--tool-call-parser` reads the calls out of its text: `hermes` (Qwen, Hermes: `<tool_call>{"name",
  "arguments"}</tool_call>` after any text) or `llama3_json` (Llama 3.x: the whole reply one or more
  `{"name", "parameters"}` objects, `;`-separated, after an optional `<|python_tag|>`). Without the flag,
  "auto" is a 400, as in vLLM: the server cannot tell a call from prose.
A reply that carries calls has `content` null (or the text before them), `tool_calls` with ids, and
`finish_reason: "tool_calls"`; a reply whose text holds no call the parser reads is plain content.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from .bodies import bad
from .structured import Structured

PARSERS = ("hermes", "llama3_json")
FIELDS = ("tools", "tool_choice", "parallel_tool_calls")
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


@dataclass(frozen=True)
class Tools:
    """A chat request's tools: `declared` as sent (the template's `tools`), `choice` "none" | "auto" |
    "required" | "named" (then `name`), and whether several calls may come at once."""

    declared: tuple[dict, ...]
    choice: str
    name: str | None = None
    parallel: bool = True

    def schema(self, name: str) -> dict:
        function = next(t["function"] for t in self.declared if t["function"]["name"] == name)
        return function.get("parameters") or {"type": "object", "properties": {}}

    def structured(self) -> Structured | None:
        """What a named or required choice constrains the text to (None: "auto" or "none")."""
        if self.choice == "named":
            assert self.name is not None
            return Structured("json", self.schema(self.name), "tool_choice")
        if self.choice != "required":
            return None
        calls = [
            {
                "type": "object",
                "properties": {
                    "name": {"const": t["function"]["name"]},
                    "parameters": self.schema(t["function"]["name"]),
                },
                "required": ["name", "parameters"],
                "additionalProperties": False,
            }
            for t in self.declared
        ]
        array: dict[str, Any] = {"type": "array", "items": {"anyOf": calls}, "minItems": 1}
        return Structured("json", array if self.parallel else {**array, "maxItems": 1}, "tool_choice")


def parse(data: dict, parser: str | None) -> Tools | None:
    """The request's tools, checked (400 naming the field); None where it gives none or chooses "none"."""
    declared = data.get("tools")
    choice = data.get("tool_choice")
    parallel = data.get("parallel_tool_calls")
    parallel = True if parallel is None else parallel  # NOTE: null is the default, as for every field
    if not isinstance(parallel, bool):
        raise bad("'parallel_tool_calls' must be true or false.", "parallel_tool_calls")
    if declared is None:
        if choice not in (None, "none"):
            raise bad("'tool_choice' needs 'tools': declare the functions the model may call.", "tool_choice")
        return None
    names = _declared_names(declared)
    if choice is None:
        choice = "auto"
    if choice == "none":
        return None
    if choice == "auto":
        if parser is None:
            raise bad(
                "'tool_choice': 'auto' (the default once 'tools' are given) needs the server started with "
                f"--tool-call-parser ({' or '.join(PARSERS)}) to read calls out of the model's text; or send "
                "'tool_choice': 'required', a named function, or 'none'.",
                "tool_choice",
            )
        return Tools(tuple(declared), "auto", parallel=parallel)
    if choice == "required":
        return Tools(tuple(declared), "required", parallel=parallel)
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or not isinstance(name, str):
        raise bad(
            "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": "
            '{"name": ...}}.',
            "tool_choice",
        )
    if name not in names:
        raise bad(f"'tool_choice' names function {name!r}, which 'tools' does not declare ({names}).", "tool_choice")
    return Tools(tuple(declared), "named", name, parallel)


def _declared_names(declared) -> list[str]:
    if not isinstance(declared, list) or not declared:
        raise bad('\'tools\' must be a non-empty list of {"type": "function", "function": {...}}.', "tools")
    names = []
    for i, tool in enumerate(declared):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise bad(f'tools[{i}] must be {{"type": "function", "function": {{"name", ...}}}}.', "tools")
        name = function.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise bad(f"tools[{i}].function.name must be 1-64 letters, digits, '_' or '-'.", "tools")
        if not isinstance(function.get("parameters", {}), dict):
            raise bad(f"tools[{i}].function.parameters must be a JSON schema object.", "tools")
        names.append(name)
    if len(set(names)) < len(names):
        raise bad(f"'tools' declares a function name twice: {names}.", "tools")
    return names


def replied(tools: Tools, text: str, parser: str | None) -> tuple[str | None, list[dict]]:
    """(content, tool_calls) of an assistant's text: the calls it makes under `tools`' choice, and the text
    that is not a call (None where there is none)."""
    if tools.choice == "named":
        assert tools.name is not None
        return None, [_call(tools.name, text)]
    if tools.choice == "required":
        try:
            made = json.loads(text)
            return None, [_call(c["name"], json.dumps(c["parameters"], ensure_ascii=False)) for c in made]
        except (ValueError, TypeError, KeyError):  # NOTE: cut short by max_tokens: the text as it is
            return text, []
    found = _hermes(text) if parser == "hermes" else _llama3(text)
    declared = {t["function"]["name"] for t in tools.declared}
    # NOTE: JSON that names no declared function (an answer that happens to be an object) stays content
    if found is None or not all(c["function"]["name"] in declared for c in found[1]):
        return text, []
    return found


def _call(name: str, arguments: str) -> dict:
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _arguments(call, key: str) -> dict | None:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    arguments = call.get(key, {})
    return _call(call["name"], json.dumps(arguments, ensure_ascii=False)) if isinstance(arguments, dict) else None


def _hermes(text: str) -> tuple[str | None, list[dict]] | None:
    start = text.find("<tool_call>")
    if start < 0:
        return None
    calls = []
    for body in _HERMES.findall(text[start:]):
        try:
            call = _arguments(json.loads(body), "arguments")
        except ValueError:
            return None
        if call is None:
            return None
        calls.append(call)
    return (text[:start].strip() or None), calls


def _llama3(text: str) -> tuple[str | None, list[dict]] | None:
    rest = text.strip().removeprefix("<|python_tag|>").strip()
    if not rest.startswith("{"):
        return None
    calls, decoder, at = [], json.JSONDecoder(), 0
    while at < len(rest):
        try:
            obj, at = decoder.raw_decode(rest, at)
        except ValueError:
            return None
        if not isinstance(obj, dict):
            return None
        call = _arguments(obj, "parameters" if "parameters" in obj else "arguments")
        if call is None:
            return None
        calls.append(call)
        at = len(rest) - len(rest[at:].lstrip().removeprefix(";").lstrip())
    return None, calls


@dataclass(frozen=True)
class Reading:
    """How a chat reply's text is read for tool calls: the request's tools and the server's parser."""

    tools: Tools
    parser: str | None

    def replied(self, text: str) -> tuple[str | None, list[dict]]:
        return replied(self.tools, text, self.parser)

    def held(self) -> Held:
        return Held(self)


_MARKERS = {"hermes": "<tool_call>", "llama3_json": "<|python_tag|>"}


class Held:
    """A streamed reply's text, let out as content while it cannot be a tool call and held from where one may
    begin (hermes: a `<tool_call>` tag, or the start of one at the text's end; llama3_json: a reply that
    opens with `{` or `<|python_tag|>`). A named or required choice's text is all arguments: held whole."""

    def __init__(self, reading: Reading):
        self.reading, self.text, self.sent = reading, "", 0
        self.holding = reading.tools.choice != "auto"
        self.prose = False  # NOTE: llama3_json: the reply began as text, so no part of it is a call

    def push(self, delta: str) -> str:
        """Take the next piece of text; return the content that can go out now."""
        self.text += delta
        if self.holding:
            return ""
        end = max(self.sent, self._free_until())
        out, self.sent = self.text[self.sent : end], end
        return out

    def _free_until(self) -> int:
        marker = _MARKERS.get(self.reading.parser or "", "")
        if self.prose or not marker:
            return len(self.text)
        if self.reading.parser == "llama3_json":
            head = self.text.lstrip()
            if head and (head[0] == "{" or marker.startswith(head[: len(marker)]) or head.startswith(marker)):
                self.holding = True
            elif head:
                self.prose = True
                return len(self.text)
            return self.sent
        at = self.text.find(marker, self.sent)
        if at >= 0:
            self.holding = True
            return at
        # NOTE: the end may be the start of a marker still arriving
        tail = next((k for k in range(len(marker) - 1, 0, -1) if self.text.endswith(marker[:k])), 0)
        return len(self.text) - tail

    def finish(self) -> tuple[str | None, list[dict]]:
        """(the content not let out yet, or None; the tool calls) once the text is complete."""
        if self.holding:
            _, calls = self.reading.replied(self.text)
            if calls:
                return None, calls
        return self.text[self.sent :] or None, []
