"""kill -9, then a restart on the same port serves again from the same artifacts; SIGTERM while
requests are in flight answers them all, refuses new ones, and exits 0. A tampered artifact or an
empty folder stops the start-up with a message."""

import http.client
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from .harness import ServeProcess, assert_same, infer_json, request, rows, tensor

# NOTE: a request of 1 row waits up to 2 s for company, so requests are surely in flight at SIGTERM
HOLD = ("--max-batch-size", "8", "--preferred-batch-sizes", "8", "--max-queue-delay-us", "2000000")


def payload(x, y):
    return {"inputs": [tensor("x", x), tensor("y", y)]}


def assert_answer(answer, x, y, artifacts):
    status, _, body = answer
    assert status == 200, body
    for out, want in zip(body["outputs"], artifacts["twoheads"](x, y)):
        assert_same(np.array(out["data"], "float32").reshape(out["shape"]), want)


def queued(port: int) -> float:
    text = request(port, "GET", "/metrics")[2].decode()
    line = next(ln for ln in text.splitlines() if ln.startswith('paddle_xla_queue_depth{model="twoheads"}'))
    return float(line.split()[-1])


def test_kill_restart_then_sigterm_drains(model_dirs, artifacts):
    first = ServeProcess(model_dirs["small"], *HOLD)
    port = first.port
    try:
        x, y = rows(8, seed=1)
        assert_answer(infer_json(port, "twoheads", payload(x, y)), x, y, artifacts)
        first.signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
    finally:
        first.stop()

    second = ServeProcess(model_dirs["small"], *HOLD, port=port)
    try:
        assert_answer(infer_json(port, "twoheads", payload(x, y)), x, y, artifacts)
        held = [rows(1, seed=10 + i) for i in range(4)]
        with ThreadPoolExecutor(len(held)) as pool:
            answers = [pool.submit(infer_json, port, "twoheads", payload(*xy)) for xy in held]
            deadline = time.monotonic() + 10
            while queued(port) < len(held) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert queued(port) == len(held)
            second.signal(signal.SIGTERM)
            time.sleep(0.3)
            assert late_request_refused(port)
            for answer, (x1, y1) in zip(answers, held):
                assert_answer(answer.result(timeout=30), x1, y1, artifacts)
        assert second.wait(30) == 0, second.output
        assert "paddle-xla serve: stopped" in second.output
    finally:
        second.stop()


def late_request_refused(port: int) -> bool:
    """A request after SIGTERM: refused at connect, its connection closed, or a 503."""
    try:
        status, headers, _ = infer_json(port, "twoheads", payload(*rows(1, seed=99)))
    except (ConnectionError, http.client.RemoteDisconnected):
        return True
    return status == 0 or (status == 503 and "retry-after" in headers)


def test_start_up_refuses_a_tampered_artifact(model_dirs, tmp_path):
    with zipfile.ZipFile(os.path.join(model_dirs["small"], "twoheads.pxa")) as z:
        members = {name: z.read(name) for name in z.namelist()}
    weights = bytearray(members["weights.safetensors"])
    weights[-1] ^= 0xFF  # NOTE: one weight changed; the zip's own CRC is recomputed, the manifest's sha256 is not
    members["weights.safetensors"] = bytes(weights)
    with zipfile.ZipFile(tmp_path / "twoheads.pxa", "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    run = subprocess.run(
        [sys.executable, "-m", "paddle_xla.cli", "serve", str(tmp_path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1 and "twoheads.pxa" in run.stderr and "sha256" in run.stderr, run.stderr
    assert "listening" not in run.stdout


def test_start_up_needs_artifacts(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "paddle_xla.cli", "serve", str(tmp_path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1 and "No *.pxa files" in run.stderr and "listening" not in run.stdout


def test_a_file_or_a_missing_folder_names_the_folder_to_give(tmp_path):
    from paddle_xla.errors import ModelLoadError
    from paddle_xla.serve.repository import scan

    artifact = tmp_path / "lenet.pxa"
    artifact.write_bytes(b"")
    with pytest.raises(ModelLoadError, match=f"is a file.*paddle-xla serve {re.escape(str(tmp_path))}$"):
        scan(str(artifact), batching=False, buckets=False)
    with pytest.raises(ModelLoadError, match="does not exist.*paddle-xla serve \\."):
        scan(str(tmp_path / "models"), batching=False, buckets=False)
