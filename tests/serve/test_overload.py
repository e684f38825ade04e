"""Overload and timeouts. A long --max-queue-delay-us holds requests of 1 row in the queue (a batch
of 8 rows would leave at once), so a queue bound of 4 is easy to pass: the rest get 503 with
Retry-After, every accepted request its own correct answer. A request past its timeout gets 504."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from .harness import ServeProcess, assert_same, infer_json, rows, tensor

HOLD = ("--max-batch-size", "8", "--preferred-batch-sizes", "8", "--max-queue-delay-us", "400000")


@pytest.fixture(scope="module")
def held_server(model_dirs):
    server = ServeProcess(model_dirs["small"], *HOLD, "--max-queue-size", "4")
    yield server
    server.stop()


def payload(x, y, **parameters):
    return {"inputs": [tensor("x", x), tensor("y", y)], **({"parameters": parameters} if parameters else {})}


def test_past_the_queue_bound_503_and_every_accepted_request_answered(held_server, artifacts):
    n = 24
    inputs = [rows(1, seed=100 + i) for i in range(n)]
    start = threading.Barrier(n)

    def send(i):
        start.wait()
        return infer_json(held_server.port, "twoheads", payload(*inputs[i]))

    with ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(send, range(n)))
    statuses = [status for status, _, _ in answers]
    assert set(statuses) == {200, 503}, statuses
    for (x, y), (status, headers, body) in zip(inputs, answers):
        if status == 503:
            assert headers["retry-after"] and "--max-queue-size" in body["error"]
            continue
        want = artifacts["twoheads"](x, y)
        for out, expected in zip(body["outputs"], want):
            assert_same(np.array(out["data"], "float32").reshape(out["shape"]), expected)
    assert infer_json(held_server.port, "twoheads", payload(*rows(8, seed=1)))[0] == 200  # NOTE: still serving


def test_request_timeout_parameter_504(held_server, artifacts):
    x, y = rows(1, seed=7)
    status, _, body = infer_json(held_server.port, "twoheads", payload(x, y, timeout=100_000))  # NOTE: microseconds
    assert status == 504 and "timeout" in body["error"]
    client = httpclient.InferenceServerClient(held_server.url)
    inputs = [httpclient.InferInput("x", [1, 8], "FP32"), httpclient.InferInput("y", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(y)
    with pytest.raises(InferenceServerException) as e:
        client.infer("twoheads", inputs, timeout=1)
    assert e.value.status() == "504"
    assert_same(client.infer("twoheads", inputs).as_numpy("output_0"), artifacts["twoheads"](x, y)[0])
    client.close()


def test_server_timeout_flag_504(model_dirs):
    server = ServeProcess(model_dirs["small"], *HOLD, "--request-timeout-ms", "200")
    try:
        status, _, body = infer_json(server.port, "twoheads", payload(*rows(1, seed=8)))
        assert status == 504 and "timeout" in body["error"]
        assert (
            infer_json(server.port, "twoheads", payload(*rows(8, seed=8)))[0] == 200
        )  # NOTE: a full batch leaves at once
    finally:
        server.stop()
