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
import dataclasses
import functools
import json
import time
import traceback
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
from .logprobs import Logprobs
from .replies import Piece, Reply, chained, openai_error_body
from .scheduler import Scheduler, Stream
from .structured import Grammars
from .text import TextStream
from .tools import Reading

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

    @functools.cached_property
    def grammars(self) -> Grammars:
        a = self.artifact
        return Grammars(a.tokenizer_json, a.geometry.vocab_size, self.scheduler.engine.eos, self.name)

    def grammar(self, s: R.Sampling) -> str | None:
        """The compiled grammar of a request's structured output (None: it asks for none); 400 where it does
        not compile or this model's engine cannot follow one."""
        if s.structured is None:
            return None
        if s.ignore_eos:
            # NOTE: a finished grammar allows the EOS alone: ignored, it would repeat until max_tokens
            raise R.bad(
                f"'ignore_eos' and '{s.structured.param}' together would repeat the EOS: drop one.", "ignore_eos"
            )
        if not getattr(self.scheduler.engine, "constrains", False):
            raise R.bad(
                f"Model {self.name!r} is served without the paged KV cache, which structured output needs: "
                "serve it without --no-paged-kv-cache, or drop '" + s.structured.param + "'.",
                s.structured.param,
            )
        return self.grammars.compile(s.structured)

    @property
    def request_defaults(self) -> dict:
        """Sampling fields a request that leaves them out takes (a checkpoint's generation_config.json)."""
        return (self.artifact.manifest.get("generation") or {}).get("request_defaults") or {}


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
        return await self._openai(
            request, functools.partial(R.chat, tool_parser=self.settings.tool_call_parser), chat=True
        )

    async def _openai(self, request: Request, parse, chat: bool) -> Response:
        try:
            data = R.body_json(await self._body(request))
            model = self._model(R.model_name(data))
            parsed = parse(R.with_defaults(data, model.request_defaults))
            ids = self._prompt_ids(model, parsed)
            s = parsed.sampling
            echo = self._echo_text(model, parsed, ids)
            if s.best_of > self.settings.max_queue_size:
                raise R.bad(
                    f"{s.best_of} choices can never wait in a queue of {self.settings.max_queue_size} "
                    "(--max-queue-size): ask for fewer.",
                    "best_of" if s.best_of > s.n else "n",
                )
            # NOTE: off the event loop: a large schema, or the first one's tokenizer, takes a while to compile
            grammar = await asyncio.to_thread(model.grammar, s)
            # NOTE: best_of ranks its choices by their tokens' log-probabilities, so it asks the engine for them
            rank = s.best_of > s.n
            made = [self._events(model, ids, _choice_sampling(s, i), echo, rank, grammar) for i in range(s.best_of)]
            # NOTE: errors before the first token get their status
            choices = await unless_gone(request, _firsts(made))
        except ClientGone:
            return gone_response()
        except RequestError as e:
            return openai_error(e)
        except Exception as e:  # NOTE: a bug still answers in OpenAI's form, and the server keeps serving
            return openai_error(self._internal(e))
        token_text = model.artifact.token_text if model.has_tokenizer else None
        top = s.logprobs
        reply = Reply(
            model.name, chat, len(ids), lambda: Logprobs(top, chat, token_text) if top is not None else None, s.n
        )
        if parsed.tools is not None:
            reply.reading = Reading(parsed.tools, self.settings.tool_call_parser)
        if s.stream:
            return EventSourceResponse(reply.stream(choices, s.include_usage))
        try:
            return JSONResponse(await unless_gone(request, reply.whole(choices)))
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
            grammar = await asyncio.to_thread(model.grammar, sampling)
            pieces = self._events(model, ids, sampling, grammar=grammar)
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
                try:
                    async for piece in chained(first, pieces):
                        yield {
                            "data": json.dumps(
                                {
                                    **head,
                                    "text_output": piece.text,
                                    "token_ids": piece.ids,
                                    "finish_reason": piece.finish,
                                }
                            )
                        }
                except RequestError as e:
                    # NOTE: the 200 is out: the error is the stream's last event, in KServe's form (as Triton sends it)
                    yield {"data": json.dumps({"error": e.message})}

            return EventSourceResponse(events())

        async def whole():
            text, ids_out, finish = [], [], None
            async for piece in chained(first, pieces):
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
        parsed = R.completion(R.with_defaults(fields, model.request_defaults))
        for name, default in (("logprobs", None), ("echo", False), ("n", 1), ("best_of", 1)):
            if getattr(parsed.sampling, name) != default:
                raise R.bad(f"'{name}' is served on /v1/completions (KServe's generate makes one output).", name)
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
            prompt = chat_mod.render(
                model.artifact.manifest.get("chat"), parsed.messages, model.name, parsed.template_args
            )
        if isinstance(prompt, str):
            if not model.has_tokenizer:
                raise R.bad(
                    f"Model {model.name!r} was exported without a tokenizer: send token ids as the prompt.", "prompt"
                )
            try:
                # NOTE: a chat template writes its own special tokens (a BOS): the tokenizer adds none (vLLM's rule)
                return tuple(model.artifact.encode(prompt, add_special_tokens=parsed.messages is None))
            except GenerationError as e:
                raise R.bad(str(e), "prompt") from None
        assert prompt is not None  # NOTE: a request holds a prompt or messages
        return prompt

    def _echo_text(self, model: LlmModel, parsed: R.Parsed, ids) -> str:
        """The prompt as an echo gives it back: its text, or its ids decoded."""
        if isinstance(parsed.prompt, str):
            return parsed.prompt
        return model.artifact.decode(ids) if model.has_tokenizer else ""

    async def _events(
        self, model: LlmModel, ids, s: R.Sampling, echo_text: str = "", rank: bool = False, grammar: str | None = None
    ) -> AsyncIterator[Piece]:
        engine, g = model.scheduler.engine, model.artifact.geometry
        scored = s.echo and s.logprobs is not None
        max_new = s.max_tokens
        if max_new is None:  # NOTE: chat without max_tokens: what the context leaves (padding takes no slot)
            max_new = max(1, g.max_length - len(ids) + 1)
        # NOTE: each choice follows the grammar from its start, with a matcher of its own (made off the loop)
        constraint = None if grammar is None else await asyncio.to_thread(model.grammars.constraint, grammar)
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
            logprobs=s.logprobs is not None or rank,
            ignore_eos=s.ignore_eos,
            choices=s.best_of,
            constraint=constraint,
        )
        try:
            # NOTE: max_tokens 0 (an echo's prompt alone) needs the room of the prompt only
            engine.check(dataclasses.replace(request, max_new_tokens=max(1, max_new)))
        except GenerationError as e:
            # NOTE: in the API's own words: PaddleFormers' max_new_tokens is OpenAI's max_tokens
            message = str(e).replace("max_new_tokens", "max_tokens")
            raise R.bad(message, "max_tokens" if "max_tokens" in message else "prompt") from None
        if scored and getattr(engine, "prompt_scorer", None) is None:
            raise R.bad(
                f"Model {model.name!r} does not score prompts (echo with logprobs): it is served without the "
                "paged KV cache, or it is a plain decoder; drop 'echo' or 'logprobs'.",
                "echo",
            )
        if s.echo and not scored and max_new == 0:
            yield Piece(echo_text, [], "length")
            return
        timeout = self.settings.request_timeout_ms / 1e3
        stream = Stream(request, asyncio.get_running_loop(), deadline=time.monotonic() + timeout if timeout else None)
        stream.score_prompt = scored
        model.scheduler.submit(stream)  # NOTE: before the echo's text: a full queue's 503 still gets its status
        if s.echo and not scored:
            yield Piece(echo_text, [])
        text = TextStream(
            model.artifact.decode if model.has_tokenizer else None, s.stop, s.include_stop_str, s.min_tokens
        )
        done = False
        try:
            while True:
                kind, value, *more = await stream.queue.get()
                if kind == "prompt_scores":
                    yield Piece(echo_text, [], scores=_prompt_entries(ids, value))
                    continue
                if kind == "token":
                    delta = text.push(value)
                    scores = [(value, more[0])] if more and more[0] is not None else []
                    # NOTE: a stop token id ends it as a stop string does (not before min_tokens: vLLM's rule)
                    if value in s.stop_token_ids and len(text.ids) >= s.min_tokens and not text.stopped:
                        delta += text.end_here()
                    if text.stopped:
                        done = True
                        model.scheduler.cancel(stream)
                        yield Piece(delta, [value], "stop", scores)
                        return
                    yield Piece(delta, [value], scores=scores)
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


def _prompt_entries(ids, scores) -> list:
    """A prompt's logprobs entries: its first token has none (nothing comes before it), token t the scores of
    position t - 1."""
    return [(int(ids[0]), None)] + [(int(ids[t]), scores.at(t - 1)) for t in range(1, len(ids))]


def _choice_sampling(s: R.Sampling, i: int) -> R.Sampling:
    """Choice i's sampling: its own key (a seeded request's choice i draws from seed + i)."""
    return dataclasses.replace(s, seed=None if s.seed is None else s.seed + i)


async def _firsts(made: list) -> list:
    """Each choice's (first piece, the rest). As soon as one fails before its first piece (or this is
    cancelled: the client left), every choice is closed, their requests cancelled, and the error raised."""
    tasks = [asyncio.ensure_future(anext(pieces)) for pieces in made]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        return [(task.result(), pieces) for task, pieces in zip(tasks, made)]
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for pieces in made:
            await pieces.aclose()
        raise
