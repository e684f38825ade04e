"""Serving a language model: `paddle-xla serve` (continuous batching, OpenAI streaming) under closed-loop
clients, against the offline `gen.generate` at batch 32 and PaddleFormers' eager `generate` behind the
same HTTP stack (Starlette + uvicorn), one request at a time, in the same run.

The model is generate.py's Llama shape (about 100M parameters, random weights). Prompts are 32-512 token
ids and outputs 16-256 tokens (max_tokens; no EOS stops them), drawn uniformly with a fixed seed. At each
concurrency level the clients send streaming requests one after another, and only a window of
--window-s seconds counts; it opens --warm-s after they start, but not before every client has finished
its first request (`sustained`: the steady state, without the ramp and the drain of a fixed set of
requests). Per request it records the time to the first token and the arrival of each
token as the client receives it (a decode chunk arrives as one event, so with --chunk k, k - 1 of every
k gaps are near zero). It reports output tokens/s, request throughput, TTFT and inter-token latency
p50/p99, and the decode step time of a full batch (timed directly on the continuous engine just before
and just after each level, once the server is idle again, so each level's ITL has its own yardstick).

    .venv/bin/python benchmarks/serve_llm.py                 # 30-40 minutes on 2 cores
    .venv/bin/python benchmarks/serve_llm.py --quick         # a tiny model, seconds: checks the script runs
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import itertools
import json
import os
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
from common import server_env  # noqa: E402
from generate import SHAPE  # noqa: E402  (benchmarks/generate.py: the same model)
from gpu_llm import full_batch_steps  # noqa: E402  (the yardstick gpu.py times too)
from serve import Service  # noqa: E402   (benchmarks/serve.py: a server subprocess, ready when it says so)
from structured import char_tokenizer, structured_cost  # noqa: E402  (a JSON schema's cost)

TINY = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=1024,
    fuse_rms_norm=False,
)


def workload(n: int, vocab: int, prompt=(32, 512), output=(16, 256), seed: int = 0):
    rng = np.random.default_rng(seed)
    return [
        (
            [int(i) for i in rng.integers(3, vocab, int(rng.integers(prompt[0], prompt[1] + 1)))],
            int(rng.integers(output[0], output[1] + 1)),
        )
        for _ in range(n)
    ]


def percentile(xs, q):
    """The q-th percentile in ms; None (JSON null) when nothing was measured, e.g. the gaps of a
    service that answers in one piece."""
    return float(np.percentile(np.asarray(xs), q)) * 1e3 if xs else None


# ---- clients ------------------------------------------------------------------------------------


def stream_one(http, url: str, ids, max_tokens: int, until=lambda: float("inf")) -> dict:
    """One streaming completion: its TTFT, its inter-token gaps (s), its token count, and when it started
    and when each token arrived (time.perf_counter()). Past `until()` (a window's close, which may be set
    while the stream runs) the client stops reading and closes the stream (the server cancels the request)."""
    import httpx  # noqa: F401

    start = time.perf_counter()
    body = {"model": "llm", "prompt": ids, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    stamps, done = [], False
    with http.stream("POST", url, json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"status {r.status_code}: {r.read()[:200]}")
        for line in r.iter_lines():
            if line.startswith("data:") and line[5:].strip() == "[DONE]":
                done = True
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            n = len(json.loads(line[5:])["choices"][0]["token_ids"])
            now = time.perf_counter()
            stamps += [now] * n
            if now > until():
                break
    gaps = list(np.diff(stamps)) if len(stamps) > 1 else []
    return {
        "ttft": stamps[0] - start if stamps else None,
        "gaps": gaps,
        "tokens": len(stamps),
        "latency": time.perf_counter() - start,
        "start": start,
        "stamps": stamps,
        "done": done,
    }


def closed_loop(url: str, clients: int, jobs, call) -> dict:
    """`clients` threads, each sending its share of `jobs` one after another."""
    import httpx

    shares = [jobs[i::clients] for i in range(clients)]

    def client(share):
        with httpx.Client(timeout=None) as http:
            return [call(http, url, ids, n) for ids, n in share]

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = [r for rs in pool.map(client, shares) for r in rs]
    wall = time.perf_counter() - start
    tokens = sum(r["tokens"] for r in results)
    ttft = [r["ttft"] for r in results if r["ttft"] is not None]
    gaps = [g for r in results for g in r["gaps"]]
    return {
        "clients": clients,
        "requests": len(results),
        "wall_s": wall,
        "output_tokens": tokens,
        "output_tokens_per_s": tokens / wall,
        "requests_per_s": len(results) / wall,
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p99_ms": percentile(ttft, 99),
        "itl_p50_ms": percentile(gaps, 50),
        "itl_p99_ms": percentile(gaps, 99),
    }


class Window:
    """The measured window of one level. It opens `warm_s` after the clients start, but not before every
    client has finished its first request: closed-loop clients send their first prompts at once, and on a
    slow machine that ramp (every prompt queued, rows filling one prompt at a time) lasts minutes, so a
    fixed warm-up would measure the ramp, not the steady state. Past `max_warm_s` it opens anyway
    (`ramped` False in the level's figures)."""

    def __init__(self, clients: int, warm_s: float, window_s: float, max_warm_s: float):
        self.t0 = time.perf_counter()
        self.warm_s, self.window_s, self.max_warm_s = warm_s, window_s, max_warm_s
        self.pending, self.ramped = clients, False
        self.opens = self.closes = float("inf")
        self._lock = threading.Lock()

    def first_done(self) -> None:
        with self._lock:
            self.pending -= 1
            if self.pending == 0 and self.opens == float("inf"):
                self.ramped = True
                self._open(time.perf_counter())

    def closes_at(self) -> float:
        now = time.perf_counter()
        with self._lock:
            if self.opens == float("inf") and now - self.t0 > self.max_warm_s:
                self._open(now)
        return self.closes

    def _open(self, now: float) -> None:
        self.opens = max(now, self.t0 + self.warm_s)
        self.closes = self.opens + self.window_s


def sustained(url: str, clients: int, jobs, warm_s: float, window_s: float, max_warm_s: float) -> dict:
    """`clients` threads, each sending its share of `jobs` one after another (round and round) until the
    level's Window has closed. Only what happens inside the window counts: the tokens that arrived in it,
    the gaps between two of them, the TTFT of the requests sent in it, the requests that ended in it. So
    the figures are the server's steady state, without the ramp (every client's first prompt queued at
    once) and the drain (the last requests finishing while others have stopped) of a fixed set of requests."""
    import httpx

    window = Window(clients, warm_s, window_s, max_warm_s)
    shares = [jobs[i::clients] for i in range(clients)]

    def client(share):
        out = []
        with httpx.Client(timeout=None) as http:
            for i in itertools.count():
                if time.perf_counter() > window.closes_at():
                    return out
                ids, n = share[i % len(share)]
                out.append(stream_one(http, url, ids, n, until=window.closes_at))
                if i == 0:
                    window.first_done()

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = [r for rs in pool.map(client, shares) for r in rs]

    def inside(t):
        return window.opens <= t <= window.closes

    stamps = [t for r in results for t in r["stamps"] if inside(t)]
    gaps = [b - a for r in results for a, b in zip(r["stamps"], r["stamps"][1:]) if inside(a) and inside(b)]
    sent = [r for r in results if inside(r["start"]) and r["ttft"] is not None]
    ended = [r for r in results if r["done"] and r["stamps"] and inside(r["stamps"][-1])]
    return {
        "clients": clients,
        "method": "sustained, opens after the ramp",
        "warm_s": window.opens - window.t0,
        "ramped": window.ramped,
        "window_s": window_s,
        "requests_sent": len(results),
        "output_tokens": len(stamps),
        "output_tokens_per_s": len(stamps) / window_s,
        "requests_per_s": len(ended) / window_s,
        "ttft_p50_ms": percentile([r["ttft"] for r in sent], 50),
        "ttft_p99_ms": percentile([r["ttft"] for r in sent], 99),
        "itl_p50_ms": percentile(gaps, 50),
        "itl_p99_ms": percentile(gaps, 99),
    }


# ---- the Paddle service: PaddleFormers' eager generate behind Starlette + uvicorn ----------------


def paddle_service(net):
    """(url, stop): /v1/completions answered by net.generate, one request at a time."""
    import paddle
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    lock = threading.Lock()

    def run(ids, n):
        with lock:
            out, _ = net.generate(
                paddle.to_tensor([ids]), max_new_tokens=n, decode_strategy="greedy_search", eos_token_id=-1
            )
            return [int(t) for t in out.numpy()[0]]

    async def completions(request):
        body = await request.json()
        ids = await asyncio.to_thread(run, body["prompt"], body["max_tokens"])
        return JSONResponse({"choices": [{"token_ids": ids, "finish_reason": "length"}]})

    config = uvicorn.Config(
        Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])]),
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]

    def stop():
        server.should_exit = True
        thread.join(10)

    return f"http://127.0.0.1:{port}/v1/completions", stop


def whole_one(http, url, ids, max_tokens):
    start = time.perf_counter()
    r = http.post(url, json={"model": "llm", "prompt": ids, "max_tokens": max_tokens, "temperature": 0})
    r.raise_for_status()
    took = time.perf_counter() - start
    return {"ttft": took, "gaps": [], "tokens": len(r.json()["choices"][0]["token_ids"]), "latency": took}


# ---- offline ----------------------------------------------------------------------------------------


def offline(gen, jobs, batch: int) -> dict:
    """gen.generate on `batch` prompts of the workload at once (max_new_tokens: their mean output), the
    faster of two timed calls (a call's time varies by seconds on this machine, mostly in its prefill)."""
    rows = jobs[:batch]
    width = max(len(ids) for ids, _ in rows)
    ids = np.zeros((batch, width), np.int64)
    mask = np.zeros_like(ids)
    for b, (p, _) in enumerate(rows):
        ids[b, width - len(p) :], mask[b, width - len(p) :] = p, 1
    new = int(np.mean([n for _, n in rows]))
    kw = dict(attention_mask=mask, decode_strategy="greedy_search", eos_token_id=[])
    gen.generate(ids, max_new_tokens=new, **kw)  # warm-up
    calls = []
    for _ in range(2):
        start = time.perf_counter()
        gen.generate(ids, max_new_tokens=new, **kw)
        calls.append(time.perf_counter() - start)
    return {"batch": batch, "new_tokens": new, "output_tokens_per_s": batch * new / min(calls), "calls_s": calls}


# ---- the paged engine's goals: one client, a shared prefix, requests at once ---------------------------


def one_client(url: str, prompts, max_tokens: int) -> dict:
    """The prompts sent one after another: per request, the decode rate (its tokens after the first, per second
    from the first to the last) and the time to its first token; medians."""
    import httpx

    with httpx.Client(timeout=None) as http:
        runs = [stream_one(http, url, ids, max_tokens) for ids in prompts]
    rates = [(r["tokens"] - 1) / (r["stamps"][-1] - r["stamps"][0]) for r in runs if r["tokens"] > 2]
    return {
        "requests": len(runs),
        "prompt_tokens": [len(ids) for ids in prompts],
        "max_tokens": max_tokens,
        "tokens": [r["tokens"] for r in runs],
        "decode_tokens_per_s": float(np.median(rates)),
        "ttft_ms": float(np.median([r["ttft"] for r in runs])) * 1e3,
    }


def offline_one(net, context: int, prefill_chunk: int, prompts, new_tokens: int) -> dict:
    """A batch-1 px.Generator on each prompt alone: its decode rate ((new_tokens - 1) / (the call's time less a
    1-token call's)) and its prefill (the 1-token call); medians over the prompts."""
    from paddle_xla.api.generator import Generator

    gen1 = Generator(net, max_batch_size=1, max_length=context, prefill_chunk=prefill_chunk)
    kw = dict(decode_strategy="greedy_search", eos_token_id=[])
    rates, firsts = [], []
    for ids in prompts:
        x = np.asarray([ids], np.int64)
        gen1.generate(x, max_new_tokens=new_tokens, **kw)  # NOTE: compiles this prompt's programs
        one = min(_timed(gen1.generate, x, max_new_tokens=1, **kw) for _ in range(2))
        full = min(_timed(gen1.generate, x, max_new_tokens=new_tokens, **kw) for _ in range(2))
        rates.append((new_tokens - 1) / (full - one))
        firsts.append(one)
    return {"decode_tokens_per_s": float(np.median(rates)), "prefill_ms": float(np.median(firsts)) * 1e3}


def _timed(fn, *args, **kwargs) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def eager_one(net, prompt, new_tokens: int) -> dict:
    """PaddleFormers' eager generate on one prompt, at its faster of 1 and all threads (generate.py's
    paddle_side): its decode rate, (new_tokens - 1) / (the call's time less a 1-token call's)."""
    from generate import paddle_side

    side = paddle_side(net, np.asarray([prompt], np.int64), new_tokens, repeats=2)
    return {"decode_tokens_per_s": (new_tokens - 1) / (side["full"] - side["ttft"]), "threads": side["threads"]}


def shared_prefix(url: str, vocab: int, n: int = 8, prefix: int = 384, total: int = 400) -> dict:
    """n prompts of `total` tokens whose first `prefix` are the same, one after another: the time to the first
    token of the first (cold) and the mean of the others."""
    import httpx

    rng = np.random.default_rng(7)
    common = [int(i) for i in rng.integers(3, vocab, prefix)]
    prompts = [common + [int(i) for i in rng.integers(3, vocab, total - prefix)] for _ in range(n)]
    with httpx.Client(timeout=None) as http:
        ttft = [stream_one(http, url, ids, 4)["ttft"] for ids in prompts]
    warm = float(np.mean(ttft[1:]))
    return {
        "ttft_ms": [t * 1e3 for t in ttft],
        "cold_ms": ttft[0] * 1e3,
        "warm_mean_ms": warm * 1e3,
        "ratio": warm / ttft[0],
    }


def at_once(base_url: str, vocab: int, n: int, totals=(64, 192)) -> dict:
    """n requests sent together, prompt and max_tokens together `totals` tokens: the most that ran at once
    (the server's busy sequences, read from /metrics every 50 ms)."""
    import httpx

    rng = np.random.default_rng(3)
    jobs = []
    for _ in range(n):
        size = int(rng.integers(totals[0], totals[1] + 1))
        prompt = int(rng.integers(size // 4, size * 3 // 4))
        jobs.append(([int(i) for i in rng.integers(3, vocab, prompt)], size - prompt))
    most, done = [0], threading.Event()

    def watch():
        with httpx.Client(timeout=10) as http:
            while not done.is_set():
                for line in http.get(f"{base_url}/metrics").text.splitlines():
                    if line.startswith("paddle_xla_llm_slots_busy{"):
                        most[0] = max(most[0], int(float(line.split()[-1])))
                time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        level = closed_loop(f"{base_url}/v1/completions", n, jobs, stream_one)
    finally:
        done.set()
        watcher.join(5)
    return {
        "requests": n,
        "tokens_each": list(totals),
        "most_at_once": most[0],
        "output_tokens_per_s": level["output_tokens_per_s"],
    }


def idle(base_url: str, bound_s: float = 300.0) -> float:
    """Wait until the server holds no request (busy rows and waiting requests both 0 in its /metrics), at most
    `bound_s`; the seconds it took. A level's clients close their streams at the window's end, and the
    server's work on them must not overlap the next timing."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    start = time.perf_counter()
    while time.perf_counter() - start < bound_s:
        families = text_string_to_metric_families(httpx.get(f"{base_url}/metrics", timeout=30).text)
        held = [
            sample.value
            for family in families
            for sample in family.samples
            if sample.name in ("paddle_xla_llm_slots_busy", "paddle_xla_llm_waiting")
        ]
        if held and not any(held):
            break
        time.sleep(0.5)
    return time.perf_counter() - start


def crowd_on(server, args, shape) -> dict:
    """The at-once phase (at_once) on a running server started with the at-once flags."""
    crowd = at_once(f"http://{server.url}", shape["vocab_size"], *((16, (16, 64)) if args.quick else (96, (64, 192))))
    crowd["kv_cache_tokens"] = args.at_once_kv_tokens
    crowd["max_prefill_tokens"] = args.at_once_prefill_tokens
    crowd["server_ready_s"] = server.ready_s
    print(json.dumps({"at_once": crowd}), flush=True)
    return crowd


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument(
        "--warm-s",
        type=float,
        default=60.0,
        help="seconds the clients run at least before the measured window opens (1 client: a tenth "
        "of it); it opens only once every client has finished its first request",
    )
    ap.add_argument(
        "--max-warm-s",
        type=float,
        default=900.0,
        help="the window opens after this many seconds even if the ramp has not ended",
    )
    ap.add_argument("--window-s", type=float, default=150.0, help="the measured window, seconds")
    ap.add_argument("--rows", type=int, default=32, help="decode batch rows (the generator's max_batch_size)")
    ap.add_argument("--chunk", type=int, default=1, help="decode steps per host call")
    ap.add_argument(
        "--prefill-chunk", type=int, default=64, help="prompts longer than this go in this many tokens per decode chunk"
    )
    ap.add_argument("--paddle-requests", type=int, default=6)
    ap.add_argument(
        "--one-client-tokens", type=int, default=128, help="max_tokens of the one-client requests (prompts of 128)"
    )
    ap.add_argument(
        "--at-once-kv-tokens",
        type=int,
        default=32 * 512,
        help="the KV cache (--kv-cache-tokens) of the server that counts how many requests run at once",
    )
    ap.add_argument(
        "--at-once-prefill-tokens",
        type=int,
        default=256,
        help="that server's --max-prefill-tokens: prompt tokens let in beside each decode chunk",
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "serve_llm.json"))
    args = ap.parse_args()
    import logging

    import paddle
    from paddleformers.transformers.llama import LlamaConfig, LlamaForCausalLM

    import paddle_xla as px
    from paddle_xla.api.generator import Generator

    logging.getLogger("httpx").setLevel(logging.WARNING)  # NOTE: PaddleFormers sets the root logger to INFO
    if args.quick:
        # NOTE: few rows and a small at-once cache: few bucket programs to compile
        args.warm_s, args.window_s, args.rows, args.at_once_kv_tokens = 5.0, 3.0, 4, 1024
    shape = TINY if args.quick else SHAPE
    prompt, output = ((8, 64), (4, 32)) if args.quick else ((32, 512), (16, 256))
    paddle.seed(0)
    net = LlamaForCausalLM(LlamaConfig(**{**shape, "max_position_embeddings": 1024}))
    net.eval()
    context = prompt[1] + output[1]
    prefill_chunk = 16 if args.quick else args.prefill_chunk  # NOTE: --quick's prompts are chunked too
    gen = Generator(net, max_batch_size=args.rows, max_length=context, chunk=args.chunk, prefill_chunk=prefill_chunk)
    folder = tempfile.mkdtemp(prefix="serve_llm_")
    start = time.perf_counter()
    # NOTE: a character tokenizer, for the structured-output requests (benchmarks/structured.py)
    px.export(gen, os.path.join(folder, "llm.pxa"), tokenizer=char_tokenizer())
    export_s = time.perf_counter() - start
    jobs = workload(max(args.concurrency) * 16, shape["vocab_size"], prompt, output)
    prompts = [ids for ids, _ in jobs]  # NOTE: the full-batch yardstick's rows take their first ids
    env = server_env()
    argv = [
        sys.executable,
        "-m",
        "paddle_xla.cli",
        "serve",
        folder,
        "--port",
        "0",
        "--max-queue-size",
        "1024",
        "--request-timeout-ms",
        "0",
    ]
    at_once_flags = [
        "--kv-cache-tokens",
        str(args.at_once_kv_tokens),
        "--max-prefill-tokens",
        str(args.at_once_prefill_tokens),
    ]
    # NOTE: --quick checks the script: its at-once phase runs on the main server, one server start fewer
    service = Service([*argv, *at_once_flags] if args.quick else argv, env)
    levels, after, crowd = [], None, {}
    rng = np.random.default_rng(5)
    ones = [[int(i) for i in rng.integers(3, shape["vocab_size"], 16 if args.quick else 128)] for _ in range(3)]
    one_tokens = 32 if args.quick else args.one_client_tokens
    try:
        url = f"http://{service.url}/v1/completions"
        served_one = one_client(url, ones, one_tokens)
        print(json.dumps({"one_client": served_one}), flush=True)
        prefix = shared_prefix(url, shape["vocab_size"], **({"prefix": 32, "total": 40} if args.quick else {}))
        print(json.dumps({"shared_prefix": prefix}), flush=True)
        schema = structured_cost(url, ones * 3, **({"length": 12, "clients": (1, 3)} if args.quick else {}))
        print(json.dumps({"structured": schema}), flush=True)
        if args.quick:
            crowd = crowd_on(service, args, shape)
        for clients in args.concurrency:
            warm = args.warm_s / 10 if clients == 1 else args.warm_s
            # NOTE: each level's yardstick is timed just before it and just after it (the server idle): this
            # machine's speed drifts by a third within half an hour, and a ratio to a step timed at another
            # moment carries that drift. A level's "after" is the next one's "before": nothing runs between.
            before = after or full_batch_steps(gen.continuous(), prompts)
            level = sustained(url, clients, jobs, warm, args.window_s, args.max_warm_s)
            level["idle_after_s"] = idle(f"http://{service.url}")
            after = full_batch_steps(gen.continuous(), prompts)
            level["full_batch_step_ms"] = float(np.median(before + after))
            level["full_batch_step_ms_before_after"] = [float(np.median(before)), float(np.median(after))]
            level["itl_p99_over_step"] = (
                level["itl_p99_ms"] / level["full_batch_step_ms"] if level["itl_p99_ms"] is not None else None
            )
            levels.append(level)
            print(json.dumps(level), flush=True)
    finally:
        service.stop()
    # NOTE: --quick skips this second server (a minute of compiles on a slow machine): the same client code
    # runs against the main one, and the engine without batch invariance is tested in tests/generation
    served_fast = None if args.quick else not_batch_invariant(argv, env, ones, one_tokens)
    # NOTE: batch-invariant (the default): short requests run more at once than max_batch_size all the same
    if not args.quick:
        many = Service([*argv, *at_once_flags], env)
        try:
            crowd = crowd_on(many, args, shape)
        finally:
            many.stop()
    offline_1 = offline_one(net, context, prefill_chunk, ones[:2], one_tokens)
    eager_1 = eager_one(net, ones[0], one_tokens)
    base = offline(gen, jobs, min(32, args.rows))
    step_ms = float(np.median([lv["full_batch_step_ms"] for lv in levels]))
    purl, stop = paddle_service(net)
    try:
        theirs = closed_loop(purl, 1, jobs[: args.paddle_requests], whole_one)
    finally:
        stop()
    result = {
        "model": f"PaddleFormers LlamaForCausalLM, random weights, "
        f"{sum(int(np.prod(p.shape)) for p in net.parameters()) / 1e6:.0f}M parameters",
        "rows": args.rows,
        "chunk": args.chunk,
        "prefill_chunk": prefill_chunk,
        "context": context,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "export_s": export_s,
        "server_ready_s": service.ready_s,
        "levels": levels,
        "one_client": {
            "served": served_one,
            "served_not_batch_invariant": served_fast,
            "offline_batch_1": offline_1,
            "paddleformers_eager": eager_1,
        },
        "shared_prefix": prefix,
        "structured": schema,
        "at_once": crowd,
        "offline": base,
        "full_batch_step_ms": step_ms,
        "paddle_service": theirs,
        "threads": os.cpu_count(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    at32 = next((lv for lv in levels if lv["clients"] == 32), levels[-1])
    result["goals"] = {
        "clients": at32["clients"],
        "vs_offline": at32["output_tokens_per_s"] / base["output_tokens_per_s"],
        "vs_paddle_service": at32["output_tokens_per_s"] / theirs["output_tokens_per_s"],
        "itl_p99_over_step": at32["itl_p99_over_step"],
        "one_client_vs_offline_batch_1": served_one["decode_tokens_per_s"] / offline_1["decode_tokens_per_s"],
        "one_client_vs_paddleformers_eager": served_one["decode_tokens_per_s"] / eager_1["decode_tokens_per_s"],
        "one_client_ttft_over_offline_prefill": served_one["ttft_ms"] / offline_1["prefill_ms"],
        "one_client_not_batch_invariant_vs_offline_batch_1": _ratio(served_fast, offline_1),
        "one_client_not_batch_invariant_vs_paddleformers_eager": _ratio(served_fast, eager_1),
        "shared_prefix_ttft_ratio": prefix["ratio"],
        "most_at_once": crowd["most_at_once"],
        "json_schema_tokens_per_s_ratio": {lv["clients"]: lv["ratio"] for lv in schema["levels"]},
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(
        f"\n{result['model']}; {args.rows} rows, chunk {args.chunk}, prefill chunk {prefill_chunk}; "
        f"prompts {prompt[0]}-{prompt[1]}, "
        f"outputs {output[0]}-{output[1]} tokens\n"
    )
    print("| clients | output tok/s | req/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | full-batch step ms |")
    print("|---|---|---|---|---|---|")
    for lv in levels:
        print(
            f"| {lv['clients']} | {lv['output_tokens_per_s']:.1f} | {lv['requests_per_s']:.2f} | "
            f"{lv['ttft_p50_ms']:.0f} / {lv['ttft_p99_ms']:.0f} | {lv['itl_p50_ms']:.1f} / {lv['itl_p99_ms']:.1f} | "
            f"{lv['full_batch_step_ms']:.0f} |"
        )
    print(
        f"\noffline gen.generate batch {base['batch']}: {base['output_tokens_per_s']:.1f} tok/s "
        f"(decode step at a full batch, median of the levels' {step_ms:.1f} ms); Paddle eager service: "
        f"{theirs['output_tokens_per_s']:.1f} tok/s"
    )
    g = result["goals"]
    print(
        f"one client: {served_one['decode_tokens_per_s']:.1f} tok/s decode, "
        f"{g['one_client_vs_offline_batch_1']:.2f}x the offline batch-1 generator "
        f"({offline_1['decode_tokens_per_s']:.1f}), {g['one_client_vs_paddleformers_eager']:.2f}x PaddleFormers' eager "
        f"({eager_1['decode_tokens_per_s']:.1f}); TTFT {g['one_client_ttft_over_offline_prefill']:.2f}x the offline "
        f"prefill; {_without_invariance(served_fast, g)}; shared prefix: TTFT "
        f"{g['shared_prefix_ttft_ratio']:.2f}x the cold request's; "
        f"{crowd['most_at_once']} of {crowd['requests']} requests at once in {crowd['kv_cache_tokens']} KV tokens; "
        "decode tokens/s with a JSON schema over without: "
        + ", ".join(f"{lv['ratio']:.2f}x at {lv['clients']} clients" for lv in schema["levels"])
    )
    print(
        f"at {g['clients']} clients: {g['vs_offline']:.0%} of offline, {g['vs_paddle_service']:.2f}x the Paddle "
        f"service, ITL p99 = {g['itl_p99_over_step']:.1f}x the full-batch step"
    )
    return 0


def not_batch_invariant(argv: list[str], env: dict[str, str], prompts: list[list[int]], tokens: int) -> dict:
    """One client's decode speed on a server started with --no-batch-invariance."""
    fast = Service([*argv, "--no-batch-invariance"], env)
    try:
        served = one_client(f"http://{fast.url}/v1/completions", prompts, tokens)
        served["server_ready_s"] = fast.ready_s
        print(json.dumps({"one_client_not_batch_invariant": served}), flush=True)
        return served
    finally:
        fast.stop()


def _ratio(served: dict | None, peer: dict) -> float | None:
    return None if served is None else served["decode_tokens_per_s"] / peer["decode_tokens_per_s"]


def _without_invariance(served: dict | None, goals: dict) -> str:
    if served is None:
        return "without batch invariance: not run (--quick)"
    return (
        f"without batch invariance {served['decode_tokens_per_s']:.1f} tok/s "
        f"({goals['one_client_not_batch_invariant_vs_offline_batch_1']:.2f}x, "
        f"{goals['one_client_not_batch_invariant_vs_paddleformers_eager']:.2f}x)"
    )


if __name__ == "__main__":
    sys.exit(main())
