"""A served language model past its deadline (504, slot freed) and at SIGTERM (streams finish, exit 0)."""
import concurrent.futures
import json
import signal
import time

import httpx

from .harness import ServeProcess
from .test_llm import CONTEXT, Alone, _settles, llm  # noqa: F401  (llm: the module's exported generator)


def test_a_request_past_its_deadline_gets_504_and_frees_its_slot(llm):  # noqa: F811
    server = ServeProcess(llm[0], "--request-timeout-ms", "1")
    try:
        with httpx.Client(base_url=f"http://{server.url}", timeout=30) as http:
            body = {"model": "llm", "prompt": "w5 w6", "max_tokens": 40, "temperature": 0}
            r = http.post("/v1/completions", json=body)
            assert r.status_code == 504 and "--request-timeout-ms" in r.json()["error"]["message"]
            with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as s:
                events = [line[5:].strip() for line in s.iter_lines() if line.startswith("data:")]
            assert any('"code": 504' in e for e in events) and events[-1] == "[DONE]"
            _settles(http)
    finally:
        server.stop()


def test_sigterm_lets_running_streams_finish_then_exits_0(llm):  # noqa: F811
    folder, art = llm
    alone = Alone(art)
    server = ServeProcess(folder)
    url = f"http://{server.url}/v1/completions"
    started = concurrent.futures.ThreadPoolExecutor(8)

    def stream(i):
        body = {"model": "llm", "prompt": f"w{5 + i} w{9 + i}", "max_tokens": CONTEXT - 16 + 1, "temperature": 0,
                "stream": True}
        ids = []
        with httpx.Client(timeout=60) as http, http.stream("POST", url, json=body) as r:
            first.append(i)
            for line in r.iter_lines():
                if line.startswith("data:") and line[5:].strip() != "[DONE]":
                    ids += json.loads(line[5:])["choices"][0]["token_ids"]
        return body["prompt"], ids
    first = []
    try:
        futures = [started.submit(stream, i) for i in range(8)]
        deadline = time.monotonic() + 30
        while len(first) < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.signal(signal.SIGTERM)
        for f in futures:
            prompt, ids = f.result(timeout=60)
            assert ids == alone(art.encode(prompt), CONTEXT - 16 + 1)
        assert server.wait(60) == 0, server.output
    finally:
        started.shutdown()
        server.stop()
