"""serve/llm/routes.unless_gone under a real uvicorn server: a client that closes its connection while its
answer has not begun (a request queued for a row, a whole reply being made) cancels the work at once; a
client that stays gets the result."""

import asyncio
import socket
import threading
import time

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from paddle_xla.serve.llm.routes import ClientGone, gone_response, unless_gone


def _serve(app):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_work_is_cancelled_when_the_client_leaves_and_finished_when_it_stays():
    events = {"cancelled": threading.Event(), "answered": []}

    async def waits_for_a_row(seconds):
        try:
            await asyncio.sleep(seconds)
            return {"tokens": [1, 2, 3]}
        except asyncio.CancelledError:
            events["cancelled"].set()
            raise

    async def handler(request):
        body = await request.json()  # NOTE: the body is read first, as the server's routes do
        try:
            out = await unless_gone(request, waits_for_a_row(body["seconds"]))
        except ClientGone:
            return gone_response()
        events["answered"].append(out)
        return JSONResponse(out)

    server, thread, url = _serve(Starlette(routes=[Route("/work", handler, methods=["POST"])]))
    try:
        start = time.monotonic()
        try:
            httpx.post(f"{url}/work", json={"seconds": 60}, timeout=0.5)
            raise AssertionError("the client was expected to give up")
        except httpx.TimeoutException:
            pass
        assert events["cancelled"].wait(10), "the work went on after its client left"
        assert time.monotonic() - start < 10 and events["answered"] == []
        r = httpx.post(f"{url}/work", json={"seconds": 0.2}, timeout=10)
        assert r.status_code == 200 and r.json() == {"tokens": [1, 2, 3]} and len(events["answered"]) == 1
    finally:
        server.should_exit = True
        thread.join(10)
