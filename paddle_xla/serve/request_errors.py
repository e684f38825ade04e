"""The one error a request can end in: an HTTP status and a message, sent as KServe's {"error": ...}."""

from __future__ import annotations

from ..errors import PaddleXlaError

RETRY_AFTER_S = "1"


class RequestError(PaddleXlaError):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}
        self.param: str | None = None  # the request field at fault, where one is (OpenAI's "param")
        self.code: str | None = None  # OpenAI's machine-readable "code" (e.g. "model_not_found"), where one fits


def bad_request(message: str) -> RequestError:
    return RequestError(400, message)


def unavailable(message: str) -> RequestError:
    """503 with Retry-After: the request was fine, the server cannot take it now."""
    return RequestError(503, message, {"Retry-After": RETRY_AFTER_S})
