"""The language-model routes: OpenAI's `/v1/models`, `/v1/completions`, `/v1/chat/completions`, and KServe's
generate extension as Triton has it (`/v2/models/{name}/generate`, `generate_stream`). Streams go out as
server-sent events (sse-starlette) and end with `[DONE]` (OpenAI) or the last event (KServe).

Every request runs through `_events`: checked (400 naming the field or the limit), queued with its
model's scheduler (503 past --max-queue-size), then its tokens become text as they come; a client that
goes away cancels its request, and its row is freed before the next decode chunk: mid-stream (the SSE
response notices), and also while the request still waits for a row or a whole (non-streaming) reply is
being made (`unless_gone` watches the connection), so an abandoned prompt is never prefilled. Errors are
OpenAI's body, {"error": {"message", "type", "param", "code"}}, on /v1 and KServe's {"error": message} on
/v2."""

from __future__ import annotations

import asyncio
import json
import time
import traceback
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...errors import GenerationError
from ...generation.continuous import Request as GenRequest
from ..http_io import error_response, read_body
from ..request_errors import RequestError, unavailable
from . import chat as chat_mod
from . import requests as R
from .scheduler import Scheduler, Stream
from .text import TextStream

if TYPE_CHECKING:
    from ...artifact.generator_reader import GeneratorArtifact


@dataclass
class LlmModel:
    name: str
    artifact: GeneratorArtifact
    scheduler: Scheduler
    created: int

    @property
    def has_tokenizer(self) -> bool:
        return self.artifact.manifest.get("tokenizer") is not None


@dataclass
class Piece:
    text: str
    ids: list[int]
    finish: str | None = None


class ClientGone(Exception):
    """The client closed its connection before its answer began."""


async def unless_gone(request: Request, work):
    """`work`'s result, or ClientGone as soon as the client closes its connection first. Then `work` is
    cancelled, and with it the request it waits on (_events' finally): a request still queued for a row is
    dropped before it is prefilled, and a whole reply stops at the next decode chunk."""
    task, gone = asyncio.ensure_future(work), asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # NOTE: also when this handler is cancelled itself
        gone.cancel()
        if not task.done():
            task.cancel()
    if task.done() and not task.cancelled():
        return task.result()
    raise ClientGone


async def _disconnected(request: Request) -> None:
    # NOTE: the body has been read, so the connection's next ASGI message is its end
    while (await request.receive())["type"] != "http.disconnect":
        pass


def routes(handlers: LlmHandlers) -> list[Route]:
    h = handlers
    return [
        Route("/v1/models", h.list_models),
        Route("/v1/models/{name}", h.retrieve_model),
        Route("/v1/completions", h.completions, methods=["POST"]),
        Route("/v1/chat/completions", h.chat_completions, methods=["POST"]),
        Route("/v2/models/{name}/generate", h.generate, methods=["POST"]),
        Route("/v2/models/{name}/generate_stream", h.generate_stream, methods=["POST"]),
    ]


def gone_response() -> Response:
    # NOTE: nobody reads it; 499 (nginx's "client closed request") is what the access log shows
    return Response(status_code=499)


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


def openai_error(e: RequestError) -> JSONResponse:
    return JSONResponse(openai_error_body(e), e.status, headers=e.headers)


def _model_card(m: LlmModel) -> dict:
    """A served model as OpenAI's model object (and vLLM's max_model_len)."""
    return {
        "id": m.name,
        "object": "model",
        "created": m.created,
        "owned_by": "paddle_xla",
        "max_model_len": m.artifact.geometry.max_length,
    }


class LlmHandlers:
    def __init__(self, llms: dict[str, LlmModel], settings, state, metrics, log):
        self.llms, self.settings, self.state, self.metrics, self.log = llms, settings, state, metrics, log

    # ---- OpenAI ----
    async def list_models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [_model_card(m) for m in self.llms.values()]})

    async def retrieve_model(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self.llms:
            return openai_error(self._unknown(name))
        return JSONResponse(_model_card(self.llms[name]))

    async def completions(self, request: Request) -> Response:
        return await self._openai(request, R.completion, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self._openai(request, R.chat, chat=True)

    async def _openai(self, request: Request, parse, chat: bool) -> Response:
        try:
            parsed = parse(R.body_json(await self._body(request)))
            model = self._model(parsed.model)
            ids = self._prompt_ids(model, parsed)
            pieces = self._events(model, ids, parsed.sampling)
            # NOTE: errors before the first token get their status
            first = await unless_gone(request, anext(pieces))
        except ClientGone:
            return gone_response()
        except RequestError as e:
            return openai_error(e)
        except Exception as e:  # NOTE: a bug still answers in OpenAI's form, and the server keeps serving
            return openai_error(self._internal(e))
        reply = _Reply(model.name, chat, len(ids))
        if parsed.sampling.stream:
            return EventSourceResponse(reply.stream(first, pieces, parsed.sampling.include_usage))
        try:
            return JSONResponse(await unless_gone(request, reply.whole(first, pieces)))
        except ClientGone:
            return gone_response()
        except RequestError as e:
            return openai_error(e)

    # ---- KServe generate extension ----
    async def generate(self, request: Request) -> Response:
        return await self._kserve(request, stream=False)

    async def generate_stream(self, request: Request) -> Response:
        return await self._kserve(request, stream=True)

    async def _kserve(self, request: Request, stream: bool) -> Response:
        try:
            model = self._model(request.path_params["name"], status_name="model")
            data = R.body_json(await self._body(request))
            ids, sampling = self._kserve_inputs(model, data)
            pieces = self._events(model, ids, sampling)
            first = await unless_gone(request, anext(pieces))
        except ClientGone:
            return gone_response()
        except RequestError as e:
            return error_response(e)
        except Exception as e:
            return error_response(self._internal(e))
        head = {"model_name": model.name, "model_version": "1"}
        if stream:

            async def events():
                async for piece in _chain(first, pieces):
                    yield {
                        "data": json.dumps(
                            {**head, "text_output": piece.text, "token_ids": piece.ids, "finish_reason": piece.finish}
                        )
                    }

            return EventSourceResponse(events())

        async def whole():
            text, ids_out, finish = [], [], None
            async for piece in _chain(first, pieces):
                text.append(piece.text)
                ids_out += piece.ids
                finish = piece.finish or finish
            return {**head, "text_output": "".join(text), "token_ids": ids_out, "finish_reason": finish}

        try:
            return JSONResponse(await unless_gone(request, whole()))
        except ClientGone:
            return gone_response()
        except RequestError as e:
            return error_response(e)

    def _kserve_inputs(self, model: LlmModel, data: dict):
        params = data.get("parameters") or {}
        if not isinstance(params, dict):
            raise R.bad("'parameters' must be an object.", "parameters")
        fields = {
            k: v
            for k, v in {**data, **params}.items()
            if k not in ("text_input", "input_ids", "parameters", "bad_words", "stop_words", "id")
        }
        stop = data.get("stop_words") or params.get("stop_words")
        if stop:
            fields["stop"] = stop
        fields["model"] = model.name
        if "input_ids" in data:
            fields["prompt"] = data["input_ids"]
        elif "text_input" in data:
            fields["prompt"] = data["text_input"]
        else:
            raise R.bad("the request needs 'text_input' (text) or 'input_ids' (token ids).", "text_input")
        parsed = R.completion(fields)
        return self._prompt_ids(model, parsed), parsed.sampling

    # ---- shared ----
    async def _body(self, request: Request) -> bytes:
        if self.state.draining:
            raise unavailable("The server is shutting down; send the request to another replica.")
        return await read_body(request, self.settings.max_body_bytes, self.settings.body_timeout_s)

    def _unknown(self, name: str, param: str = "model") -> RequestError:
        error = RequestError(404, f"Unknown model {name!r}; this server serves language models {sorted(self.llms)}.")
        error.param, error.code = param, "model_not_found"
        return error

    def _model(self, name: str, status_name: str = "model") -> LlmModel:
        model = self.llms.get(name)  # NOTE: a dict lookup, never a path
        if model is None:
            raise self._unknown(name, status_name)
        if not model.scheduler.ready:
            raise unavailable(f"Model {name!r} is still compiling; retry shortly.")
        return model

    def _prompt_ids(self, model: LlmModel, parsed: R.Parsed) -> tuple[int, ...]:
        prompt = parsed.prompt
        if parsed.messages is not None:
            prompt = chat_mod.render(model.artifact.manifest.get("chat"), parsed.messages, model.name)
        if isinstance(prompt, str):
            if not model.has_tokenizer:
                raise R.bad(
                    f"Model {model.name!r} was exported without a tokenizer: send token ids as the prompt.", "prompt"
                )
            try:
                return tuple(model.artifact.encode(prompt))
            except GenerationError as e:
                raise R.bad(str(e), "prompt") from None
        assert prompt is not None  # NOTE: a request holds a prompt or messages
        return prompt

    async def _events(self, model: LlmModel, ids, s: R.Sampling) -> AsyncIterator[Piece]:
        engine, g = model.scheduler.engine, model.artifact.geometry
        max_new = s.max_tokens
        if max_new is None:  # NOTE: chat without max_tokens: what the context leaves (padding takes no slot)
            max_new = max(1, g.max_length - len(ids) + 1)
        request = GenRequest(
            tuple(ids),
            max_new,
            "sampling" if s.temperature > 0 else "greedy_search",
            temperature=s.temperature if s.temperature > 0 else 1.0,
            top_k=s.top_k,
            top_p=s.top_p,
            repetition_penalty=s.repetition_penalty,
            min_new_tokens=s.min_tokens,
            seed=s.seed,
        )
        try:
            engine.check(request)
        except GenerationError as e:
            # NOTE: in the API's own words: PaddleFormers' max_new_tokens is OpenAI's max_tokens
            message = str(e).replace("max_new_tokens", "max_tokens")
            raise R.bad(message, "max_tokens" if "max_tokens" in message else "prompt") from None
        timeout = self.settings.request_timeout_ms / 1e3
        stream = Stream(request, asyncio.get_running_loop(), deadline=time.monotonic() + timeout if timeout else None)
        model.scheduler.submit(stream)
        text = TextStream(
            model.artifact.decode if model.has_tokenizer else None, s.stop, s.include_stop_str, s.min_tokens
        )
        done = False
        try:
            while True:
                kind, value = await stream.queue.get()
                if kind == "token":
                    delta = text.push(value)
                    if text.stopped:
                        done = True
                        model.scheduler.cancel(stream)
                        yield Piece(delta, [value], "stop")
                        return
                    yield Piece(delta, [value])
                    continue
                done = True
                if value == "timeout":
                    raise RequestError(
                        504,
                        f"Model {model.name!r} did not finish within the request timeout "
                        f"({self.settings.request_timeout_ms} ms, --request-timeout-ms).",
                    )
                if value.startswith("error"):
                    raise RequestError(500, f"Generation failed: {value[len('error: ') :]}")
                if value == "cancelled":
                    return
                yield Piece(text.finish(), [], value)
                return
        finally:
            if not done:
                model.scheduler.cancel(stream)  # NOTE: the client went away (or the task was cancelled)

    def _internal(self, e: Exception) -> RequestError:
        self.log(f"request failed:\n{traceback.format_exc()}")
        return RequestError(500, f"Internal error: {type(e).__name__}: {e}")


async def _chain(first: Piece, rest: AsyncIterator[Piece]) -> AsyncIterator[Piece]:
    yield first
    async for piece in rest:
        yield piece


class _Reply:
    """OpenAI's response objects for one completion (text or chat), whole or as stream chunks."""

    def __init__(self, model: str, chat: bool, prompt_tokens: int):
        self.model, self.chat, self.prompt_tokens = model, chat, prompt_tokens
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
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

    async def whole(self, first: Piece, rest: AsyncIterator[Piece]) -> dict:
        text, ids, finish = [], [], None
        async for piece in _chain(first, rest):
            text.append(piece.text)
            ids += piece.ids
            finish = piece.finish or finish
        content = "".join(text)
        choice = (
            {"index": 0, "message": {"role": "assistant", "content": content}}
            if self.chat
            else {"index": 0, "text": content, "logprobs": None}
        )
        return {
            **self._head(False),
            "choices": [{**choice, "finish_reason": finish, "token_ids": ids}],
            "usage": self._usage(len(ids)),
        }

    async def stream(self, first: Piece, rest: AsyncIterator[Piece], include_usage: bool):
        made = 0
        try:
            if self.chat:
                yield self._chunk({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None})
            async for piece in _chain(first, rest):
                made += len(piece.ids)
                body = {"delta": {"content": piece.text}} if self.chat else {"text": piece.text, "logprobs": None}
                yield self._chunk({"index": 0, **body, "finish_reason": piece.finish, "token_ids": piece.ids})
        except RequestError as e:
            # NOTE: the 200 and the first events are out; the error ends the stream as an event of its own
            yield {"data": json.dumps(openai_error_body(e))}
        if include_usage:
            yield {"data": json.dumps({**self._head(True), "choices": [], "usage": self._usage(made)})}
        yield {"data": "[DONE]"}

    def _chunk(self, choice: dict) -> dict:
        return {"data": json.dumps({**self._head(True), "choices": [choice]})}
