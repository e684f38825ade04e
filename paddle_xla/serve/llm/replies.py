"""OpenAI's response objects for a completion or a chat completion of `n` choices, whole or as stream
chunks, from each choice's pieces (routes.py makes them). Paddle-free.

Each choice is its own request (its own row, its own key: a seeded request's choice i draws from seed + i),
so choices run side by side and stream interleaved, each chunk naming its `index`. `usage` counts the prompt
once and every choice's tokens. With `best_of` > n, best_of choices are made and the n with the highest mean
log-probability per token are returned (OpenAI's rule), reindexed; usage counts all of them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field

from ..request_errors import RequestError
from .logprobs import Logprobs
from .tools import Held, Reading

Pieces = tuple  # (the first Piece, an async iterator of the rest): one choice's


@dataclass
class Piece:
    text: str
    ids: list[int]
    finish: str | None = None
    scores: list = field(default_factory=list)  # (id, TokenScores) of each id, where logprobs were asked for


def openai_error_body(e: RequestError) -> dict:
    """OpenAI's error body: a string `type` by the status, the offending `param`, and a string `code` or null
    (the HTTP status is the response's, not the body's)."""
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        413: "invalid_request_error",
        503: "service_unavailable",
        504: "timeout",
    }.get(e.status, "server_error")
    return {"error": {"message": e.message, "type": kind, "param": e.param, "code": e.code}}


async def chained(first: Piece, rest: AsyncIterator[Piece]) -> AsyncIterator[Piece]:
    yield first
    async for piece in rest:
        yield piece


@dataclass
class _Choice:
    text: str
    ids: list[int]
    finish: str | None
    scores: list


class Reply:
    """logprobs(): a fresh Logprobs for one choice, or None where they were not asked for; keep: how many
    choices go out (n; fewer than made where best_of asks for more)."""

    def __init__(
        self, model: str, chat: bool, prompt_tokens: int, logprobs: Callable[[], Logprobs | None], keep: int = 1
    ):
        self.model, self.chat, self.prompt_tokens, self.logprobs, self.keep = model, chat, prompt_tokens, logprobs, keep
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.reading: Reading | None = None  # NOTE: set where a chat request gives tools (tools.py)
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"

    def _usage(self, completion_tokens: int) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        }

    def _head(self, chunk: bool) -> dict:
        kind = self.object + (".chunk" if chunk and self.chat else "")
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    async def whole(self, choices: list[Pieces]) -> dict:
        # NOTE: a choice that fails (500, 504) cancels the others: their rows are freed at once
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(_collected(first, rest)) for first, rest in choices]
        except BaseExceptionGroup as e:
            raise e.exceptions[0] from None  # NOTE: the first choice's error is the reply's (its status)
        made = [task.result() for task in tasks]
        kept = _best(made, self.keep) if self.keep < len(made) else made
        return {
            **self._head(False),
            "choices": [self._whole_choice(i, c) for i, c in enumerate(kept)],
            "usage": self._usage(sum(len(c.ids) for c in made)),
        }

    def _whole_choice(self, index: int, c: _Choice) -> dict:
        logprobs = self.logprobs()
        values = logprobs.of(c.scores) if logprobs is not None else None
        if not self.chat:
            return {"index": index, "text": c.text, "logprobs": values, "finish_reason": c.finish, "token_ids": c.ids}
        message, finish = self._message(c.text, c.finish)
        return {"index": index, "message": message, "logprobs": values, "finish_reason": finish, "token_ids": c.ids}

    def _message(self, text: str, finish: str | None) -> tuple[dict, str | None]:
        """The assistant's message for its text, with the tool calls it makes (and their finish reason)."""
        if self.reading is None:
            return {"role": "assistant", "content": text}, finish
        content, calls = self.reading.replied(text)
        if not calls:
            return {"role": "assistant", "content": content}, finish
        return {
            "role": "assistant",
            "content": content,
            "tool_calls": calls,
        }, "tool_calls" if finish == "stop" else finish

    async def stream(self, choices: list[Pieces], include_usage: bool):
        made = 0
        try:
            if self.chat:
                for i in range(len(choices)):
                    yield self._chunk(
                        {"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                    )
            merged = _interleaved(choices, [self.logprobs() for _ in choices])
            reading = self.reading
            held: dict[int, tuple[Held, list[Piece]]] = {}
            if reading is not None:
                held = {i: (reading.held(), []) for i in range(len(choices))}
            async with contextlib.aclosing(merged):  # NOTE: a client that leaves cancels every choice now
                async for i, piece, logprobs in merged:
                    made += len(piece.ids)
                    if reading is None:
                        yield self._stream_chunk(i, piece, logprobs)
                        continue
                    # NOTE: text that may be a tool call waits until the reply's end; the rest goes out as it comes
                    chunk = self._held_chunk(i, piece, logprobs, *held[i])
                    if chunk is not None:
                        yield chunk
        except RequestError as e:
            # NOTE: the 200 and the first events are out; the error ends the stream as an event of its own
            yield {"data": json.dumps(openai_error_body(e))}
        if include_usage:
            yield {"data": json.dumps({**self._head(True), "choices": [], "usage": self._usage(made)})}
        yield {"data": "[DONE]"}

    def _stream_chunk(self, i: int, piece: Piece, logprobs: Logprobs | None) -> dict:
        values = logprobs.of(piece.scores) if logprobs is not None else None
        body = {"delta": {"content": piece.text}} if self.chat else {"text": piece.text}
        return self._chunk(
            {"index": i, **body, "logprobs": values, "finish_reason": piece.finish, "token_ids": piece.ids}
        )

    def _held_chunk(self, i: int, piece: Piece, logprobs: Logprobs | None, held: Held, waiting: list) -> dict | None:
        """The chunk a piece of a reply that may call tools sends now (None: it waits); `waiting` keeps the
        pieces whose text is held, so that their ids and scores go out with it."""
        waiting.append(piece)
        content = held.push(piece.text)
        finish = piece.finish
        delta: dict = {"content": content}
        if finish is not None:
            rest, calls = held.finish()
            delta = {"content": content + (rest or "") if content or rest else None}
            if calls:
                delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(calls)]
                finish = "tool_calls" if finish == "stop" else finish
        elif not content:
            return None
        scores = [s for p in waiting for s in p.scores]
        ids = [t for p in waiting for t in p.ids]
        waiting.clear()
        values = logprobs.of(scores) if logprobs is not None else None
        return self._chunk({"index": i, "delta": delta, "logprobs": values, "finish_reason": finish, "token_ids": ids})

    def _chunk(self, choice: dict) -> dict:
        return {"data": json.dumps({**self._head(True), "choices": [choice]})}


async def _collected(first: Piece, rest: AsyncIterator[Piece]) -> _Choice:
    text, ids, finish, scores = [], [], None, []
    async for piece in chained(first, rest):
        text.append(piece.text)
        ids += piece.ids
        scores += piece.scores
        finish = piece.finish or finish
    return _Choice("".join(text), ids, finish, scores)


def _best(made: list[_Choice], keep: int) -> list[_Choice]:
    """The `keep` choices of highest mean log-probability per generated token (best_of), in that order."""

    def mean(c: _Choice) -> float:
        values = [float(s.logprob) for _, s in c.scores[-len(c.ids) :] if s is not None] if c.ids else []
        return sum(values) / len(values) if values else float("-inf")

    return sorted(made, key=mean, reverse=True)[:keep]


async def _interleaved(choices: list[Pieces], logprobs: list) -> AsyncGenerator[tuple, None]:
    """(choice index, piece, its Logprobs) as the choices make them; a choice's error ends all."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, first: Piece, rest: AsyncIterator[Piece]) -> None:
        try:
            async for piece in chained(first, rest):
                await queue.put((i, piece, None))
        except Exception as e:  # NOTE: handed to the reader, which raises it
            await queue.put((i, None, e))
        await queue.put((i, None, None))

    tasks = [asyncio.ensure_future(pump(i, first, rest)) for i, (first, rest) in enumerate(choices)]
    try:
        left = len(tasks)
        while left:
            i, piece, error = await queue.get()
            if error is not None:
                raise error
            if piece is None:
                left -= 1
                continue
            yield i, piece, logprobs[i]
    finally:
        for task in tasks:
            task.cancel()
