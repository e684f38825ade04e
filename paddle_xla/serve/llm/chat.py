"""Chat messages to a prompt with the model's own chat template, rendered in Jinja2's sandbox (a template
from an artifact cannot reach Python's internals or the file system). Paddle-free."""

from __future__ import annotations

from functools import lru_cache

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..request_errors import RequestError


def _raise(message: str):
    # NOTE: Hugging Face / PaddleFormers templates call raise_exception() on messages they refuse
    raise TemplateError(message)


@lru_cache(maxsize=8)
def _template(text: str):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    return env.from_string(text)


def render(chat: dict | None, messages, model: str, args: dict | None = None) -> str:
    """The prompt text for `messages` ({role, content} dicts), ending where the assistant's turn begins unless
    `args` say add_generation_prompt false; `args` (documents, chat_template_kwargs) are the template's too."""
    if not chat or not chat.get("template"):
        raise RequestError(
            400,
            f"Model {model!r} has no chat template: use /v1/completions, or export it with "
            "px.export(gen, path, tokenizer=..., chat_template=...)",
        )
    try:
        variables = {
            "bos_token": chat.get("bos_token", ""),
            "eos_token": chat.get("eos_token", ""),
            "add_generation_prompt": True,
            **(args or {}),
            "messages": list(messages),
        }
        return _template(chat["template"]).render(**variables)
    except TemplateError as e:
        raise RequestError(400, f"The chat template of {model!r} refused these messages: {e}") from None
