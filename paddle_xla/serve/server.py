"""Start-up, serving and shutdown: load the repository, bind the socket ourselves (so --port 0 can
report the port the OS chose), serve with uvicorn, warm every model up in its worker thread, and on
SIGTERM or Ctrl-C stop taking requests, answer those in flight, and exit 0."""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable

import uvicorn

from ..api.checkpoint_folder import BuildOptions
from ..errors import PaddleXlaError
from ..planner.serving import size_text
from ..runtime.compile_cache import LOWERED, watch_compiles
from . import repository
from .app import ServerState, build_app
from .batcher import ModelWorker
from .llm.routes import LlmModel
from .llm.scheduler import Scheduler
from .metrics import Metrics
from .settings import Settings

DRAIN_WITHOUT_TIMEOUT_S = 60.0  # NOTE: how long a drain may take when --request-timeout-ms is 0


def log(message: str) -> None:
    print(f"paddle-xla serve: {message}", flush=True)


def run(folder: str, settings: Settings) -> int:
    """Serve until SIGTERM/SIGINT; the process's exit status."""
    generators: dict = {}
    try:
        # NOTE: the port first: a busy one is refused in a moment, not after minutes of loading and compiling
        sock = bind(settings.host, settings.port)
    except OSError as e:
        print(f"paddle-xla serve: error: {_bind_error(settings.host, settings.port, e)}", file=sys.stderr, flush=True)
        return 1
    try:
        options = BuildOptions(
            settings.max_batch_size, settings.max_model_len, settings.dtype, settings.speculative_config
        )
        models = repository.scan(folder, settings.batching, bool(settings.seq_buckets), log, generators, options)
        llms = {name: _llm(name, artifact, settings, log) for name, artifact in generators.items()}
    except (PaddleXlaError, OSError) as e:
        sock.close()
        print(f"paddle-xla serve: error: {e}", file=sys.stderr, flush=True)
        return 1
    try:
        # NOTE: clients that connect while uvicorn starts wait in the backlog. Two servers bound to one port with
        # SO_REUSEADDR can both load (Linux refuses only the second listen), so the loser says so here.
        sock.listen(2048)
    except OSError as e:
        sock.close()
        print(f"paddle-xla serve: error: {_bind_error(settings.host, settings.port, e)}", file=sys.stderr, flush=True)
        return 1
    metrics, state, failures = Metrics(), ServerState(), []
    drain_s = settings.request_timeout_ms / 1e3 + 5 if settings.request_timeout_ms else DRAIN_WITHOUT_TIMEOUT_S

    def on_failure(message: str) -> None:  # NOTE: from a worker thread, once serving; uvicorn polls should_exit
        log(f"error: {message}")
        failures.append(message)
        server.should_exit = True

    workers = {name: ModelWorker(model, settings, metrics, log, on_failure) for name, model in models.items()}
    for llm in llms.values():
        llm.scheduler.on_failure = on_failure
        llm.scheduler.metrics = metrics.llm(llm.name)
        stats = getattr(llm.scheduler.engine, "stats", None)  # NOTE: a speculating engine's counts
        if stats is not None:
            llm.scheduler.spec_metrics = metrics.speculation(llm.name, stats.method)
    # NOTE: uvicorn's http="auto" parses with httptools (a serve dependency) rather than h11: A/B on 2 cores,
    # ResNet-50 bf16 (600 KB binary requests) at 8 / 32 clients 50.3 / 54.2 -> 55.6 / 55.6 req/s
    config = uvicorn.Config(
        build_app(models, workers, settings, metrics, state, log, llms),
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=drain_s,
    )
    runners = {**workers, **{name: llm.scheduler for name, llm in llms.items()}}
    server = DrainingServer(config, state, lambda: [runner.drain() for runner in runners.values()])
    _let_uvicorn_signals_end_quietly()
    asyncio.run(_serve(server, sock, runners, _url(settings.host, sock), drain_s, metrics))
    log("stopped")
    return 1 if failures else 0


class DrainingServer(uvicorn.Server):
    """uvicorn's server, which on SIGTERM/SIGINT also tells the app to refuse new requests (503)
    for the moment before uvicorn closes the listening socket and idle connections, and the
    batchers to send what they hold now instead of waiting for company that will not come."""

    def __init__(self, config: uvicorn.Config, state: ServerState, drain: Callable[[], object]):
        super().__init__(config)
        self.state, self.drain = state, drain
        self.loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets=None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig, frame) -> None:
        self.state.draining = True
        if self.loop is not None:
            # NOTE: this runs as a signal handler, maybe while the loop's thread holds a batcher's lock
            self.loop.call_soon_threadsafe(self.drain)
        super().handle_exit(sig, frame)


def _llm(name: str, artifact, settings: Settings, log) -> LlmModel:
    """A generator artifact served by the language-model routes: its engine (paged where the artifact holds
    the decode step for it) and scheduler."""
    if settings.paged_kv_cache and artifact.can_page:
        engine = artifact.paged(
            kv_cache_tokens=settings.kv_cache_tokens or None,
            kv_cache_memory=settings.kv_cache_memory or None,
            batch_invariant=settings.batch_invariance,
            prefix_cache=settings.prefix_cache,
        )
        cache = (
            f"prefix cache in chunks of {engine.geometry.prefill_chunk} tokens"
            if engine.prefix_cache
            else "no prefix cache"
        )
        log(
            f"{name}: paged KV cache of {engine.blocks.capacity_tokens} tokens in blocks of {engine.block_size}, up "
            f"to {engine.max_seqs} requests at once, {cache}; compiling {engine.programs} programs before it is ready"
        )
        shape = engine.serving_shape()
        log(
            f"{name}: device memory: weights {size_text(engine.weight_bytes)}, KV cache "
            f"{size_text(engine.blocks.capacity_tokens * shape.kv_token_bytes)}, working arrays about "
            f"{size_text(shape.work_bytes)} (paddle-xla plan-serving sizes it for a device)"
        )
    else:
        if settings.paged_kv_cache:
            log(f"{name}: rows of max_length slots: {artifact.path!r} has no paged decode step (export it again)")
        engine = artifact.continuous()
    stats = getattr(engine, "stats", None)  # NOTE: a speculating engine's counts
    if stats is not None:
        log(f"{name}: speculative decoding by {stats.method}, {engine.config.num_speculative_tokens} guesses a round")
    elif settings.speculative_config:
        log(
            f"{name}: --speculative-config applies to checkpoint folders; {artifact.path!r} decodes one token a step "
            "(export it with speculative_config to speculate)"
        )
    # NOTE: the same progress as an ordinary model's warm-up (warmup.py): "NAME: compiled WHAT (i/n, t s)"
    engine.on_compiled = lambda what: log(f"{name}: compiled {what}")
    scheduler = Scheduler(
        name, engine, settings.max_queue_size, log, on_failure=log, max_prefill_tokens=settings.max_prefill_tokens
    )
    return LlmModel(name, artifact, scheduler, int(time.time()))


def bind(host: str, port: int) -> socket.socket:
    """The server's socket, bound to host:port but not yet listening (run listens once the models are loaded,
    so that no client waits on a server that is still loading)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    sock = socket.socket(family, kind, proto)
    # NOTE: a restart right after a crash (kill -9) must bind the port its old connections still hold in TIME_WAIT
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def _bind_error(host: str, port: int, e: OSError) -> str:
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if e.errno == errno.EADDRINUSE:
        return (
            f"{where} is already in use (another server is listening there): give another port with "
            f"--port N (--port 0 picks a free one), or stop the server that holds {where}"
        )
    if e.errno == errno.EACCES:
        return f"no permission to listen on {where} (ports below 1024 need privileges): give --port N with N >= 1024"
    return f"cannot listen on {where}: {e.strerror or e} (check --host and --port)"


async def _serve(
    server: uvicorn.Server,
    sock: socket.socket,
    workers: dict[str, ModelWorker],
    url: str,
    drain_s: float,
    metrics: Metrics,
) -> None:
    _let_streams_finish_on_drain()
    ready = lambda: all(worker.ready for worker in workers.values())  # noqa: E731
    # NOTE: watched from the start, counted once every model is ready: a request may come the moment /health
    # says so, before any task of this loop runs again
    stop_watching = watch_compiles(LateCompiles(metrics, ready))
    loop = asyncio.get_running_loop()
    for worker in workers.values():
        worker.start(loop) if isinstance(worker, ModelWorker) else worker.start()
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.01)
    if server.started:
        log(f"listening on {url}")
    announcing = asyncio.create_task(_announce_ready(workers, ready))
    try:
        await serving
    finally:
        announcing.cancel()
        try:
            await asyncio.to_thread(_stop, workers, drain_s)
        finally:
            stop_watching()  # NOTE: after the drain: a compile while streams finish counts too


async def _announce_ready(workers: dict, ready: Callable[[], bool]) -> None:
    while not ready():
        await asyncio.sleep(0.05)
    log(f"ready: {len(workers)} model(s): {', '.join(workers)}")


class LateCompiles:
    """Counts each program lowered once `ready()` in paddle_xla_compiles_after_ready, and logs the first."""

    def __init__(self, metrics: Metrics, ready: Callable[[], bool]):
        self.metrics, self.ready, self.count = metrics, ready, 0
        self._lock = threading.Lock()

    def __call__(self, event: str) -> None:
        if event != LOWERED or not self.ready():
            return
        with self._lock:  # NOTE: models compile on their own threads
            self.count += 1
            first = self.count == 1
        self.metrics.late_compiles.inc()
        if first:
            # NOTE: warm-up compiles every bucket, so a compile after it is a gap worth a line in the log
            log("compiled a program after ready: the request that runs it waits (paddle_xla_compiles_after_ready)")


def _stop(workers: dict[str, ModelWorker], drain_s: float) -> None:
    for worker in workers.values():
        worker.stop(drain_s)


def _let_streams_finish_on_drain() -> None:
    # NOTE: sse-starlette ends every open event stream once uvicorn begins to shut down (it polls for that every
    # 0.5 s), so on SIGTERM a long stream was cut short without an error; a drain lets running streams finish
    # instead, within uvicorn's graceful-shutdown timeout (drain_s)
    from sse_starlette.sse import AppStatus

    AppStatus.disable_automatic_graceful_drain()


def _let_uvicorn_signals_end_quietly() -> None:
    # NOTE: after a graceful shutdown uvicorn raises the signal that caused it again, through the
    # handlers it found when it started; with these no-ops a drained server exits 0, not 143.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)


def _url(host: str, sock: socket.socket) -> str:
    port = sock.getsockname()[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
