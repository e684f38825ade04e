"""A served language model past its deadline (504, slot freed) and at SIGTERM (streams finish, exit 0)."""

import asyncio
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
            # NOTE: a stream whose deadline passes before its first token gets the 504 itself; one that has
            # begun ends with an error event and [DONE]
            with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as s:
                status = s.status_code
                lines = list(s.iter_lines())
            if status == 504:
                assert "--request-timeout-ms" in json.loads("".join(lines))["error"]["message"]
            else:
                events = [line[5:].strip() for line in lines if line.startswith("data:")]
                assert status == 200 and any('"type": "timeout"' in e for e in events) and events[-1] == "[DONE]"
            # NOTE: KServe's generate_stream the same way, its error event in KServe's form
            kserve = {"text_input": "w5 w6", "parameters": {"max_tokens": 40, "temperature": 0}}
            with http.stream("POST", "/v2/models/llm/generate_stream", json=kserve) as s:
                status = s.status_code
                lines = list(s.iter_lines())
            if status == 504:
                assert "--request-timeout-ms" in json.loads("".join(lines))["error"]
            else:
                events = [json.loads(line[5:]) for line in lines if line.startswith("data:")]
                assert status == 200 and "--request-timeout-ms" in events[-1]["error"], events
            _settles(http)
    finally:
        server.stop()
    server.no_compiles_after_ready()


def _sigterm_lets_running_streams_finish_then_exits_0(server, art):
    alone = Alone(art)
    url = f"http://{server.url}/v1/completions"
    started = concurrent.futures.ThreadPoolExecutor(8)

    def stream(i):
        body = {
            "model": "llm",
            "prompt": f"w{5 + i} w{9 + i}",
            "max_tokens": CONTEXT - 16 + 1,
            "temperature": 0,
            "stream": True,
        }
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
            assert ids == alone(art.encode(prompt), CONTEXT - 16 + 1), (prompt, server.output)
        assert server.wait(60) == 0, server.output
    finally:
        started.shutdown()


def test_the_token_guards_the_new_routes_a_restart_after_kill_9_serves_and_sigterm_lets_its_streams_finish(llm):  # noqa: F811
    """--token; a server killed with -9 and started again on its port serves; on SIGTERM its running streams
    finish with their whole tokens, and it exits 0 (one server start serves the last two)."""
    server = ServeProcess(llm[0], "--token", "s3cret")
    try:
        port = server.port
        with httpx.Client(base_url=f"http://{server.url}", timeout=30) as http:
            body = {"model": "llm", "prompt": "w5 w6", "max_tokens": 3, "temperature": 0}
            for path in ("/v1/models", "/v1/completions", "/v2/models/llm/generate"):
                r = http.post(path, json=body) if path != "/v1/models" else http.get(path)
                assert r.status_code == 401, path
            r = http.post("/v1/completions", json=body, headers={"Authorization": "Bearer s3cret"})
            assert r.status_code == 200
            # NOTE: vLLM's /health, open to probes as KServe's health routes are: 200 once every model is ready
            assert http.get("/health").status_code == 200
        server.proc.kill()
        server.wait(30)
    finally:
        server.stop()
    server.no_compiles_after_ready()
    again = ServeProcess(llm[0], port=port)
    try:
        with httpx.Client(base_url=f"http://{again.url}", timeout=30) as http:
            r = http.post(
                "/v1/completions", json={"model": "llm", "prompt": "w5 w6", "max_tokens": 3, "temperature": 0}
            )
            assert r.status_code == 200 and len(r.json()["choices"][0]["token_ids"]) == 3
        _sigterm_lets_running_streams_finish_then_exits_0(again, llm[1])
    finally:
        again.stop()
    again.no_compiles_after_ready()


def test_past_the_waiting_queue_requests_get_503_with_retry_after(llm):  # noqa: F811
    # NOTE: one waiting place, and while streams run one request is admitted per decode chunk: 64 clients at
    # once asking for the whole context each overflow it
    server = ServeProcess(llm[0], "--max-queue-size", "1")
    body = {"model": "llm", "prompt": "w5 w6", "max_tokens": CONTEXT - 2 + 1, "temperature": 0}

    def post(i):
        with httpx.Client(timeout=120) as http:
            r = http.post(f"http://{server.url}/v1/completions", json=body)
            return r.status_code, r.headers.get("retry-after"), r.json()

    try:
        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            answers = list(pool.map(post, range(64)))
    finally:
        server.stop()
    server.no_compiles_after_ready()
    refused = [a for a in answers if a[0] == 503]
    assert refused and all(a[1] == "1" and "--max-queue-size" in a[2]["error"]["message"] for a in refused)
    served = [a[2]["choices"][0]["token_ids"] for a in answers if a[0] == 200]
    assert served and all(ids == served[0] for ids in served)  # the same prompt, greedy: the same tokens


def test_the_scheduler_bounds_its_waiting_queue():
    from paddle_xla.generation.continuous import Request
    from paddle_xla.serve.llm.scheduler import Scheduler, Stream
    from paddle_xla.serve.request_errors import RequestError

    scheduler = Scheduler("m", engine=None, max_waiting=2, log=print, on_failure=print)  # never started
    loop = asyncio.new_event_loop()
    try:
        for _ in range(2):
            scheduler.submit(Stream(Request((1,), 1), loop))
        try:
            scheduler.submit(Stream(Request((1,), 1), loop))
            raise AssertionError("a third request was queued")
        except RequestError as e:
            assert e.status == 503 and e.headers["Retry-After"] == "1" and "2 requests waiting" in e.message
        scheduler.drain()
        try:
            scheduler.submit(Stream(Request((1,), 1), loop))
            raise AssertionError("a request was queued while draining")
        except RequestError as e:
            assert e.status == 503 and "shutting down" in e.message
    finally:
        loop.close()


def test_a_small_kv_cache_makes_requests_wait_refuses_one_that_can_never_fit_and_reuses_prefixes(llm):  # noqa: F811
    # NOTE: 48 tokens of cache, 3 blocks of 16: a request of 16 + 16 tokens holds 2, so of 3 sent at once one
    # runs at a time, each waiting for the blocks of the one before; 40 + 20 tokens would need 4 blocks
    folder, art = llm
    alone = Alone(art)
    server = ServeProcess(folder, "--kv-cache-tokens", "48")
    try:
        with httpx.Client(base_url=f"http://{server.url}", timeout=60) as http:
            r = http.post("/v1/completions", json={"model": "llm", "prompt": list(range(3, 43)), "max_tokens": 20})
            assert r.status_code == 400, r.text
            assert "needs 4 blocks of 16; the KV cache holds 3 (48 tokens)" in r.json()["error"]["message"]
            prompts = [list(range(3 + i, 19 + i)) for i in range(3)]

            def complete(ids):
                body = {"model": "llm", "prompt": ids, "max_tokens": 16, "temperature": 0}
                return http.post("/v1/completions", json=body).json()["choices"][0]["token_ids"]

            with concurrent.futures.ThreadPoolExecutor(3) as pool:
                got = list(pool.map(complete, prompts))
            assert got == [alone(ids, 16) for ids in prompts]
            _settles(http)
            metrics = http.get("/metrics").text
            assert 'paddle_xla_llm_kv_blocks_free{model="llm"} 3.0' in metrics
            assert 'paddle_xla_llm_kv_blocks_used{model="llm"} 0.0' in metrics
            assert 'paddle_xla_llm_decode_bucket_rows_count{model="llm"}' in metrics
            # NOTE: prompts longer than a prefill chunk (16) that share their first: the second and third
            # prefill from token 16 on, beside the first's block, and get the tokens of their prompts alone
            shared = [(7 * i) % 90 + 3 for i in range(16)]
            prompts = [shared + [50 + i] * (2 + i) for i in range(3)]
            assert [complete(ids) for ids in prompts] == [alone(ids, 16) for ids in prompts]
            _settles(http)
            metrics = http.get("/metrics").text
            assert 'paddle_xla_llm_prefix_cache_hit_tokens_total{model="llm"} 32.0' in metrics
    finally:
        server.stop()
    server.no_compiles_after_ready()
