"""HTTP fuzzing of the real server, as Triton's L0_http_fuzz does: a bounded, seeded stream of
generated requests over every route and method, with mutated request lines, headers, JSON bodies
and binary-extension lengths. Nothing may get a 5xx other than 503/504, nothing may hang, no answer
may show a traceback or a file path, and after each batch of bad requests a good one is answered
exactly. Hypothesis draws the requests (derandomized: CI replays the same stream every run)."""

import json
import socket
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .harness import ServeProcess, assert_same, request, rows, tensor

EXAMPLES = 240  # NOTE: requests per run; each takes a few ms, the whole test about 20 s
GOOD_EVERY = 20  # a good request after this many generated ones
ANSWER_WITHIN_S = 10  # the body timeout is 1 s: a stalled request must be answered well before this
LEAKS = ("Traceback", 'File "', "/site-packages/", "paddle_xla/", '.py"', "Exception:")

MODELS = ["twoheads", "fixed", "bert", "cuda_only", "nope", "..", "%2e%2e", "twoheads%00", "x" * 300]
SUFFIXES = [
    "",
    "/ready",
    "/config",
    "/infer",
    "/versions/1",
    "/versions/1/infer",
    "/versions/2/infer",
    "/infer/extra",
    "//infer",
]
TOP = [
    "/v2",
    "/v2/",
    "/v2/health/live",
    "/v2/health/ready",
    "/metrics",
    "/",
    "/v2/models",
    "/v2/repository/index",
    "/v2/health/../models/twoheads",
    "/" + "a" * 2000,
]
METHODS = ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "BREW"]
DATATYPES = ["FP32", "FP64", "INT64", "INT32", "BOOL", "BYTES", "FP16", "BF16", "UINT8", "fp32", "", 7]


INFER = [
    "/v2/models/twoheads/infer",
    "/v2/models/bert/infer",
    "/v2/models/fixed/infer",
    "/v2/models/twoheads/versions/1/infer",
]


def _paths():
    # NOTE: most requests go to an infer route, where the body is read; the rest roam every route
    return st.one_of(
        st.sampled_from(INFER),
        st.sampled_from(INFER),
        st.sampled_from(TOP),
        st.builds(lambda m, s: f"/v2/models/{m}{s}", st.sampled_from(MODELS), st.sampled_from(SUFFIXES)),
    )


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, width=32), st.text(max_size=8)
)
_json_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12,
)


@st.composite
def _input(draw):
    shape = draw(st.one_of(st.just([2, 8]), st.lists(st.integers(-2, 9), max_size=4), _json_values))
    item = {
        "name": draw(st.sampled_from(["x", "y", "input_ids", "z", "", 3])),
        "shape": shape,
        "datatype": draw(st.sampled_from(DATATYPES)),
    }
    if draw(st.booleans()):
        item["data"] = draw(
            st.one_of(
                st.lists(st.floats(-1e6, 1e6, width=32), max_size=20),
                st.lists(st.integers(-5, 5), max_size=20),
                _json_values,
            )
        )
    else:
        item["parameters"] = {"binary_data_size": draw(st.one_of(st.integers(-8, 200), _json_values))}
    for key in draw(st.lists(st.sampled_from(["name", "shape", "datatype", "data", "parameters"]), max_size=2)):
        item.pop(key, None)
    return item


@st.composite
def _body(draw):
    kind = draw(st.sampled_from(["request", "request", "request", "json", "bytes", "empty"]))
    if kind == "empty":
        return b"", None
    if kind == "bytes":
        return draw(st.binary(max_size=300)), None
    if kind == "json":
        return json.dumps(draw(_json_values)).encode(), None
    doc = {"inputs": draw(st.lists(_input(), max_size=3))}
    if draw(st.booleans()):
        doc["outputs"] = [
            {
                "name": draw(st.sampled_from(["output_0", "output_1", "nope", 1])),
                "parameters": {"binary_data": draw(st.booleans())},
            }
        ]
    if draw(st.booleans()):
        doc["parameters"] = {
            "binary_data_output": draw(st.booleans()),
            "timeout": draw(st.one_of(st.integers(-1, 10**7), st.text(max_size=3))),
        }
    header = json.dumps(doc).encode()
    tail = draw(st.binary(max_size=200)) if draw(st.booleans()) else b""
    length = draw(
        st.one_of(st.none(), st.just(len(header)), st.integers(-3, len(header) + len(tail) + 5), st.text(max_size=4))
    )
    return header + tail, length


@st.composite
def http_requests(draw):
    method = draw(st.one_of(st.just("POST"), st.just("POST"), st.sampled_from(METHODS)))
    path = draw(_paths())
    body, header_length = draw(_body())
    headers = {"Host": "127.0.0.1"}
    if header_length is not None:
        headers["Inference-Header-Content-Length"] = str(header_length)
    if draw(st.booleans()):
        headers["Content-Type"] = draw(
            st.sampled_from(["application/json", "application/octet-stream", "text/x", "\u00e9"])
        )
    if draw(st.integers(0, 9)) == 0:
        headers["Content-Encoding"] = draw(st.sampled_from(["gzip", "br", "identity", "x"]))
    if draw(st.integers(0, 9)) == 0:
        headers["Expect"] = "100-continue"
    # NOTE: Content-Length is the real length, or (sometimes) fewer bytes than promised: a stalled body
    short = draw(st.integers(0, 11)) == 0 and len(body) > 2
    headers["Content-Length"] = str(len(body) + (5 if short else 0))
    return method, path, headers, body


def _raw(port: int, method: str, path: str, headers: dict, body: bytes) -> tuple[int, bytes]:
    head = (
        f"{method} {path} HTTP/1.1\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        + "Connection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WITHIN_S) as sock:
        start = time.monotonic()
        sock.sendall(head.encode("utf-8", "surrogateescape") + body)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                raise AssertionError(f"no answer within {ANSWER_WITHIN_S} s to {method} {path} {headers}") from None
            if not chunk:
                break
            chunks.append(chunk)
            if time.monotonic() - start > ANSWER_WITHIN_S:
                raise AssertionError(f"the answer to {method} {path} took over {ANSWER_WITHIN_S} s")
    answer = b"".join(chunks)
    if answer.startswith(b"HTTP/1.1 100 "):  # NOTE: Expect: 100-continue; the final answer follows
        answer = answer[answer.find(b"HTTP/1.1 ", 1) :]
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return status, answer


@pytest.fixture(scope="module")
def server(model_dirs):
    s = ServeProcess(
        model_dirs["all"],
        "--max-batch-size",
        "4",
        "--preferred-batch-sizes",
        "4",
        "--body-timeout-s",
        "1",
        "--max-body-mb",
        "0.05",
    )
    yield s
    s.stop()


def _good_request_answers_exactly(server, artifacts):
    x, y = rows(3, seed=4)
    body = json.dumps({"inputs": [tensor("x", x), tensor("y", y)]}).encode()
    status, _, answer = request(server.port, "POST", "/v2/models/twoheads/infer", body)
    assert status == 200, answer
    out = json.loads(answer)["outputs"][0]
    assert_same(np.array(out["data"], "float32").reshape(out["shape"]), artifacts["twoheads"](x, y)[0])


def test_fuzzed_requests_never_break_the_server(server, artifacts):
    seen = {"count": 0, "statuses": {}}

    @settings(
        max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(http_requests())
    def one(req):
        method, path, headers, body = req
        status, answer = _raw(server.port, method, path, headers, body)
        what = f"{method} {path} {headers} {body[:200]!r}"
        assert status != 0, f"no HTTP answer to {what}: {answer[:300]!r}"
        assert status < 500 or status in (503, 504), f"{status} for {what}: {answer[:600]!r}"
        text = answer.decode("utf-8", "replace")
        leaked = [marker for marker in LEAKS if marker in text]
        assert not leaked, f"the answer to {what} shows {leaked}: {text[:800]}"
        seen["count"] += 1
        seen["statuses"][status] = seen["statuses"].get(status, 0) + 1
        if seen["count"] % GOOD_EVERY == 0:
            _good_request_answers_exactly(server, artifacts)

    one()
    assert server.proc.poll() is None, server.output
    _good_request_answers_exactly(server, artifacts)
    # NOTE: the stream reached past the front door: requests were refused for their content, and some served
    assert seen["count"] >= EXAMPLES // 2 and {400, 404} <= set(seen["statuses"]), seen["statuses"]
