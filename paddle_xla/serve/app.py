"""The KServe v2 routes (and Triton's model config), as a Starlette app over the loaded models."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .. import __version__
from . import protocol, validation
from .batcher import ModelWorker
from .http_io import BearerAuth, error_response, on_http_exception, on_request_error, read_body
from .llm.routes import LlmHandlers
from .llm.routes import routes as llm_routes
from .metrics import CONTENT_TYPE_LATEST, UNKNOWN_MODEL, Metrics
from .repository import VERSION, ServedModel
from .request_errors import RequestError, unavailable
from .settings import Settings


class ServerState:
    """Set by server.py on SIGTERM: from then on, no new inference request is taken."""

    draining = False


def build_app(
    models: dict[str, ServedModel],
    workers: dict[str, ModelWorker],
    settings: Settings,
    metrics: Metrics,
    state: ServerState,
    log: Callable[[str], None],
    llms: dict | None = None,
) -> Starlette:
    llms = llms or {}
    h = Handlers(models, workers, settings, metrics, state, log, llms)
    model_routes = [
        ("", h.model_metadata, ["GET"]),
        ("/ready", h.model_ready, ["GET"]),
        ("/config", h.model_config, ["GET"]),
        ("/infer", h.infer, ["POST"]),
    ]
    routes = [
        Route("/v2/health/live", h.live),
        Route("/v2/health/ready", h.ready),
        Route("/health", h.ready),  # NOTE: vLLM's readiness probe: 200 once every model is compiled, 503 before
        Route("/v2", h.server_metadata),
        Route("/metrics", h.metrics_text),
    ]
    for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        routes += [Route(prefix + suffix, endpoint, methods=methods) for suffix, endpoint, methods in model_routes]
    routes += llm_routes(LlmHandlers(llms, settings, state, metrics, log))
    return Starlette(
        routes=routes,
        middleware=[Middleware(BearerAuth, token=settings.token)],
        exception_handlers={RequestError: on_request_error, HTTPException: on_http_exception},
    )


class Handlers:
    def __init__(self, models, workers, settings, metrics, state, log, llms):
        self.models, self.workers, self.settings, self.metrics, self.state, self.log = (
            models,
            workers,
            settings,
            metrics,
            state,
            log,
        )
        self.llms = llms

    # ---- health and metadata ----
    async def live(self, request: Request) -> Response:
        return JSONResponse({"live": True})

    async def ready(self, request: Request) -> Response:
        if self.state.draining:
            raise unavailable("The server is shutting down.")
        warming = [name for name, worker in self.workers.items() if not worker.ready]
        warming += [name for name, llm in self.llms.items() if not llm.scheduler.ready]
        if warming:
            raise unavailable(f"Still compiling model(s) {warming}; ready once every preferred shape is compiled.")
        return JSONResponse({"ready": True})

    async def server_metadata(self, request: Request) -> Response:
        return JSONResponse(
            {"name": "paddle_xla", "version": __version__, "extensions": ["binary_tensor_data", "model_configuration"]}
        )

    async def model_metadata(self, request: Request) -> Response:
        return JSONResponse(self._model(request).metadata())

    async def model_ready(self, request: Request) -> Response:
        model = self._model(request)
        if not self.workers[model.name].ready:
            raise unavailable(f"Model {model.name!r} is still compiling its preferred shapes.")
        return JSONResponse({"name": model.name, "ready": True})

    async def model_config(self, request: Request) -> Response:
        """Triton's model configuration (what perf_analyzer and Triton's clients read)."""
        model = self._model(request)
        batched = model.layout.batch is not None
        config = {
            "name": model.name,
            "platform": "paddle_xla",
            "max_batch_size": self.settings.max_batch_size if batched else 0,
            "input": _config_tensors(model.inputs, batched),
            "output": _config_tensors(model.outputs, batched),
        }
        if batched and self.settings.batching:
            config["dynamic_batching"] = {
                "preferred_batch_size": list(self.settings.preferred_batch_sizes),
                "max_queue_delay_microseconds": self.settings.max_queue_delay_us,
                "default_queue_policy": {"max_queue_size": self.settings.max_queue_size},
            }
        return JSONResponse(config)

    async def metrics_text(self, request: Request) -> Response:
        return Response(self.metrics.text(), media_type=CONTENT_TYPE_LATEST)

    # ---- inference ----
    async def infer(self, request: Request) -> Response:
        name = request.path_params["name"]
        label = name if name in self.models else UNKNOWN_MODEL
        start, status = time.perf_counter(), 500
        try:
            response = await self._infer(request)
            status = response.status_code
            return response
        except RequestError as e:
            status = e.status
            return error_response(e)
        except Exception as e:  # NOTE: a bug must still answer in KServe's form, and the server keep serving
            self.log(f"{name}: request failed:\n{traceback.format_exc()}")
            return error_response(RequestError(500, f"Internal error: {type(e).__name__}: {e}"))
        finally:
            self.metrics.requests.labels(label, str(status)).inc()
            self.metrics.latency.labels(label).observe(time.perf_counter() - start)

    async def _infer(self, request: Request) -> Response:
        model = self._model(request)
        if self.state.draining:
            raise unavailable("The server is shutting down; send the request to another replica.")
        worker = self.workers[model.name]
        if not worker.ready:
            raise unavailable(f"Model {model.name!r} is still compiling its preferred shapes; retry shortly.")
        body = await read_body(request, self.settings.max_body_bytes, self.settings.body_timeout_s)
        parsed = protocol.parse(body, request.headers.get(protocol.HEADER_LENGTH))
        validation.check_inputs(parsed, model, self.settings.max_batch_size)
        wanted = validation.requested_outputs(parsed, model)
        outputs = await worker.infer(protocol.read_tensors(parsed, model.inputs), self._timeout_s(parsed))
        body, header_length = protocol.encode(
            model.name, parsed.id, [(meta, outputs[meta.name], binary) for meta, binary in wanted]
        )
        if header_length is None:
            return Response(body, media_type="application/json")
        return Response(
            body, media_type="application/octet-stream", headers={protocol.HEADER_LENGTH: str(header_length)}
        )

    def _timeout_s(self, parsed: protocol.InferRequest) -> float | None:
        """The shorter of the request's own `timeout` (microseconds) and --request-timeout-ms."""
        limits = [t for t in (parsed.timeout_us / 1e6, self.settings.request_timeout_ms / 1e3) if t > 0]
        return min(limits) if limits else None

    def _model(self, request: Request) -> ServedModel:
        name, version = request.path_params["name"], request.path_params.get("version", VERSION)
        model = self.models.get(name)  # NOTE: a dict lookup, never a path: '../x' is just an unknown name
        if model is None:
            raise RequestError(404, f"Unknown model {name!r}; this server serves {sorted(self.models)}.")
        if version != VERSION:
            raise RequestError(404, f"Model {name!r} has no version {version!r}; its only version is {VERSION!r}.")
        return model


def _config_tensors(metas, batched: bool) -> list[dict]:
    # NOTE: Triton's config leaves the batch dimension out of dims when max_batch_size > 0
    return [
        {"name": m.name, "data_type": f"TYPE_{m.datatype}", "dims": list(m.shape[1:] if batched else m.shape)}
        for m in metas.values()
    ]
