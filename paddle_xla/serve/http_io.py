"""HTTP plumbing around the routes: the bearer token, the body size limit, KServe's JSON errors."""

from __future__ import annotations

import asyncio
import hmac

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from .request_errors import RequestError

OPEN_PATHS = ("/v2/health/",)  # NOTE: load balancers probe health without credentials
OPEN_ROUTES = ("/health",)  # NOTE: vLLM's probe, this path exactly


class BearerAuth:
    """ASGI middleware: every path but health needs `Authorization: Bearer <token>` (401 otherwise)."""

    def __init__(self, app, token: str | None):
        self.app, self.expected = app, f"Bearer {token}".encode() if token else None

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if self.expected and scope["type"] == "http" and not (path.startswith(OPEN_PATHS) or path in OPEN_ROUTES):
            given = Headers(scope=scope).get("authorization", "").encode()
            if not hmac.compare_digest(given, self.expected):  # NOTE: constant time, so no timing leak
                response = JSONResponse(
                    {
                        "error": "This server needs a bearer token: send the header "
                        "'Authorization: Bearer <token>' with the server's token."
                    },
                    401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole body, refused with 413 as soon as it is known to pass `limit` bytes: from
    Content-Length before reading, and by counting while reading a chunked one; and with 408 when it
    has not all arrived `timeout_s` after the headers (a body shorter than its Content-Length, an
    unfinished chunked one), so that a stalled client holds no handler for long."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding != "identity":
        raise RequestError(415, f"Content-Encoding {encoding!r} is not supported; send the body uncompressed.")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks, size = [], 0
    deadline = asyncio.get_running_loop().time() + timeout_s
    stream = request.stream().__aiter__()
    try:
        while True:
            try:
                chunk = await asyncio.wait_for(stream.__anext__(), deadline - asyncio.get_running_loop().time())
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise RequestError(
                    408,
                    f"The request body did not arrive within {timeout_s:g} s "
                    f"({size} bytes came); send the whole body (as its Content-Length "
                    "says) promptly.",
                    headers={"Connection": "close"},
                ) from None
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:  # NOTE: nobody to answer; counted as nginx's 499, not logged as a failure
        raise RequestError(499, "The client closed the connection before sending the whole body.") from None
    return b"".join(chunks)


def too_large(limit: int) -> RequestError:
    return RequestError(
        413,
        f"The request body is over this server's limit of {limit / 2**20:g} MB "
        "(--max-body-mb); send fewer rows per request, or raise the limit.",
    )


def error_response(error: RequestError) -> JSONResponse:
    return JSONResponse({"error": error.message}, error.status, headers=error.headers)


async def on_request_error(request: Request, exc: RequestError) -> JSONResponse:
    return error_response(exc)


async def on_http_exception(request: Request, exc: HTTPException) -> JSONResponse:
    message = exc.detail
    if exc.status_code == 404:
        message = f"No route {request.url.path!r}. The routes are: {routes_text(request.app.routes)}."
    return JSONResponse({"error": message}, exc.status_code, headers=exc.headers)


def routes_text(routes) -> str:
    """Every route the app serves, from its own table (so the list cannot go stale)."""

    def one(route) -> str:
        methods = sorted(set(route.methods or ()) - {"HEAD"})
        path = route.path.replace("{name}", "NAME").replace("{version}", "VERSION")
        return path if methods in ([], ["GET"]) else f"{path} ({', '.join(methods)})"

    return ", ".join(one(r) for r in routes)
