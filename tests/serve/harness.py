"""A real `paddle-xla serve` in a subprocess, and a raw HTTP helper for what tritonclient cannot send."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
from xla_flags import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LISTENING = re.compile(r"paddle-xla serve: listening on http://127\.0\.0\.1:(\d+)")
START_TIMEOUT_S = 120


class ServeProcess:
    """`paddle-xla serve FOLDER --port PORT FLAGS...` on 127.0.0.1, ready once started; always stopped by stop()."""

    def __init__(self, folder: str, *flags: str, port: int = 0, env: dict | None = None):
        # NOTE: the tests' 16 virtual CPU devices (tests/conftest.py) are no use to a server
        server_env = child_env(PYTHONUNBUFFERED="1", **(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "paddle_xla.cli", "serve", folder, "--port", str(port), *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=server_env,
            cwd=ROOT,
        )
        self.lines: list[str] = []
        self.port: int | None = None
        self._listening = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            match = LISTENING.search(line)
            if match:
                self.port = int(match.group(1))
                self._listening.set()
        self._listening.set()  # NOTE: ended without listening: _wait_ready reports the output

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        if not self._listening.wait(START_TIMEOUT_S) or self.port is None:
            raise AssertionError(f"the server did not start listening:\n{self.output}")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}:\n{self.output}")
            if request(self.port, "GET", "/v2/health/ready")[0] == 200:
                return
            time.sleep(0.1)
        raise AssertionError(f"the server was not ready within {START_TIMEOUT_S} s:\n{self.output}")

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def no_compiles_after_ready(self) -> None:
        """The server compiled nothing once it said ready (its warm-up covered every request it got); read
        after stop(), when its whole output is in."""
        late = [line for line in self.lines if "compiled a program after ready" in line]
        assert not late, f"a request made the server compile (paddle_xla_compiles_after_ready):\n{self.output}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def request(
    port: int, method: str, path: str, body=None, headers: dict | None = None, chunked: bool = False
) -> tuple[int, dict, bytes]:
    """(status, headers by lower-case name, body) of one request on a fresh connection; status 0 when
    it cannot connect."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    except ConnectionRefusedError:
        return 0, {}, b""
    finally:
        conn.close()


def infer_json(port: int, model: str, payload: dict, headers: dict | None = None) -> tuple[int, dict, dict]:
    """POST a KServe JSON request; (status, headers, decoded JSON body)."""
    status, got_headers, body = request(
        port,
        "POST",
        f"/v2/models/{model}/infer",
        json.dumps(payload).encode(),
        {"Content-Type": "application/json", **(headers or {})},
    )
    return status, got_headers, json.loads(body) if body else {}


def tensor(name: str, array, datatype: str = "FP32") -> dict:
    return {"name": name, "shape": list(array.shape), "datatype": datatype, "data": array.ravel().tolist()}


def rows(batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct random inputs (x, y) of the twoheads model."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, 8)).astype("float32"), rng.standard_normal((batch, 4)).astype("float32")


def assert_same(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def greedy_at_once(server: ServeProcess, model: str, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Each token-id prompt's greedy completion ids, all prompts sent at once through the openai client."""
    import concurrent.futures

    from openai import OpenAI

    client = OpenAI(base_url=f"http://{server.url}/v1", api_key="unused", max_retries=0, timeout=60)

    def complete(ids):
        r = client.completions.create(model=model, prompt=ids, max_tokens=max_tokens, temperature=0)
        return r.choices[0].model_extra["token_ids"]

    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(complete, prompts))
