"""64 concurrent tritonclient clients send ~2,000 requests of random batch sizes 1..8: every answer
equals the artifact's own output for that request's input (nothing lost, nothing swapped), and
the dynamic batcher did combine requests; with --no-batching it never does."""

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from .harness import ServeProcess, assert_same, request, rows

CLIENTS, PER_CLIENT, WALL_LIMIT_S = 64, 31, 120  # NOTE: 64 x 31 = 1,984 requests


def one_client(url: str, client: int, per_client: int = PER_CLIENT) -> list[tuple]:
    """(x, y, id sent, id answered, output_0, output_1) for each of this client's requests."""
    c = httpclient.InferenceServerClient(url, network_timeout=WALL_LIMIT_S)
    rng, answers = np.random.default_rng(client), []
    try:
        for k in range(per_client):
            x, y = rows(int(rng.integers(1, 9)), seed=client * 1000 + k)
            binary = bool(k % 2)  # NOTE: half JSON, half binary tensors, interleaved
            inputs = [
                httpclient.InferInput("x", list(x.shape), "FP32"),
                httpclient.InferInput("y", list(y.shape), "FP32"),
            ]
            inputs[0].set_data_from_numpy(x, binary_data=binary)
            inputs[1].set_data_from_numpy(y, binary_data=binary)
            outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("output_0", "output_1")]
            sent = f"{client}-{k}"
            result = c.infer("twoheads", inputs, outputs=outputs, request_id=sent)
            answers.append(
                (x, y, sent, result.get_response()["id"], result.as_numpy("output_0"), result.as_numpy("output_1"))
            )
    finally:
        c.close()
    return answers


def test_concurrent_clients_get_their_own_answers(main_server, artifacts):
    start = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        futures = [pool.submit(one_client, main_server.url, i) for i in range(CLIENTS)]
        answers = [a for f in futures for a in f.result(timeout=WALL_LIMIT_S)]
    took = time.monotonic() - start
    assert took < WALL_LIMIT_S, f"{len(answers)} requests took {took:.0f} s"
    assert len(answers) == CLIENTS * PER_CLIENT
    model = artifacts["twoheads"]
    for x, y, sent, answered, out0, out1 in answers:
        assert answered == sent
        want0, want1 = model(x, y)
        assert_same(out0, want0)
        assert_same(out1, want1)
    batches = _histogram(main_server.port, "paddle_xla_batch_requests", "twoheads")
    assert batches["+Inf"] > batches["1.0"], f"no batch combined two requests: {batches}"
    rows_seen = _histogram(main_server.port, "paddle_xla_batch_rows", "twoheads")
    assert rows_seen["+Inf"] < len(answers), "fewer calls than requests expected"


def test_no_batching_runs_each_request_alone(model_dirs, artifacts):
    server = ServeProcess(model_dirs["small"], "--no-batching", "--max-batch-size", "8")
    try:
        with ThreadPoolExecutor(16) as pool:
            answers = [a for f in [pool.submit(one_client, server.url, i, 4) for i in range(16)] for a in f.result()]
        for x, y, sent, answered, _out0, out1 in answers:
            assert answered == sent
            assert_same(out1, artifacts["twoheads"](x, y)[1])
        batches = _histogram(server.port, "paddle_xla_batch_requests", "twoheads")
        assert batches["1.0"] == batches["+Inf"] == len(answers)
        padded = _histogram(server.port, "paddle_xla_batch_padded_rows", "twoheads")
        assert padded["8.0"] == len(answers) and padded["+Inf"] == len(answers)  # NOTE: padded to 1, 2, 4 or 8
    finally:
        server.stop()


def _histogram(port: int, name: str, model: str) -> dict[str, float]:
    """Cumulative bucket counts by upper bound ('1.0', ..., '+Inf') of one model's histogram."""
    status, _, text = request(port, "GET", "/metrics")
    assert status == 200
    family = next(f for f in text_string_to_metric_families(text.decode()) if f.name == name)
    return {
        s.labels["le"]: s.value for s in family.samples if s.name == f"{name}_bucket" and s.labels["model"] == model
    }
