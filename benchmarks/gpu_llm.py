"""gpu.py's llm-rounds section: what a prefill chunk costs a served language model's running streams.

A server (serve/llm/scheduler.py) runs one decode step for every busy row, and between two steps at most
one prefill chunk of a new prompt. So a running stream's gap between two tokens is a decode step, or, while
prompts wait, a "round": a prefill chunk and a decode step. benchmarks/serve_llm.py's goal, inter-token p99
<= 2x the full-batch decode step at 32 clients, needs that round well under two steps. On the 2-vCPU host it
is 1.7-1.8 steps in-process (benchmarks/README.md); this section measures it on the accelerator, from the generator
artifact make_gpu_artifacts.py writes (serve_llm.py's Llama, 32 rows over 768 cache slots, prefill chunks of
64 tokens, synthetic weights), on the server's own engine (ContinuousEngine), without Paddle or HTTP.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

STEPS = 12  # NOTE: decode chunks timed for the full-batch yardstick (here and in serve_llm.py)
PROMPTS = 3  # NOTE: long prompts prefilled chunk by chunk beside the steps, one after another


def artifact_name(quick: bool) -> str:
    """The file make_gpu_artifacts.py writes this section's generator to, in the artifacts folder."""
    return "llama-tiny-serve.pxa" if quick else "llama-serve.pxa"


def full_batch_steps(engine, prompts) -> list[float]:
    """ms per decode step over STEPS decode chunks of a ContinuousEngine with every row holding a request
    (the first 16 ids of prompts[row]) that cannot end in that time; the step's cost does not depend on what
    the rows hold: its shapes are fixed."""
    from paddle_xla.generation.continuous import Request

    g = engine.geometry
    for row in range(g.max_batch_size):
        engine.free(row)
        engine.insert(row, Request(tuple(prompts[row][:16]), max_new_tokens=g.max_length - 16))
    engine.run_chunk()
    times = []
    for _ in range(STEPS):
        start = time.perf_counter()
        engine.run_chunk()
        times.append((time.perf_counter() - start) / g.chunk * 1e3)
    return times


def llm_rounds(path: str, log) -> dict[str, Any]:
    import paddle_xla.artifact as pxa
    from paddle_xla.generation.continuous import Request

    start = time.perf_counter()
    art = pxa.load(path)
    engine = art.continuous()
    engine.warm_up()
    g = engine.geometry
    warm_s = time.perf_counter() - start
    rng = np.random.default_rng(0)
    prompt = lambda n: tuple(int(i) for i in rng.integers(3, g.vocab_size, n))  # noqa: E731
    steps = full_batch_steps(engine, [prompt(16) for _ in range(g.max_batch_size)])
    # NOTE: the last row takes long prompts in, a prefill chunk beside each decode step, as a server does
    # while prompts wait; a prompt of 4.5 chunks, about serve_llm.py's mean of 272 tokens at chunks of 64
    row, length = g.max_batch_size - 1, (9 * (g.prefill_chunk or 16)) // 2
    rounds = []
    for _ in range(PROMPTS):
        engine.free(row)
        for _ in range(engine.begin(row, Request(prompt(length), max_new_tokens=4))):
            t = time.perf_counter()
            engine.step_and_fill(row)
            rounds.append((time.perf_counter() - t) * 1e3)
    step, chunk_round = float(np.median(steps)), float(np.median(rounds))
    # NOTE: where a step and a prefill share their products (CPU, float32) the engine lowers its programs from
    # the artifact's Graphs, else it runs the exported executables
    mode = "relowered, a step and a prefill as one program" if engine.shares_products else art.mode
    res = {
        "artifact": path.rsplit("/", 1)[-1],
        "mode": mode,
        "precision": g.precision,
        "rows": g.max_batch_size,
        "cache_slots": g.max_length,
        "prefill_chunk": g.prefill_chunk,
        "prompt_tokens": length,
        "warm_up_seconds": round(warm_s, 1),
        "decode_step_ms": round(step, 3),
        "decode_step_ms_all": [round(s, 3) for s in steps],
        "round_with_chunk_ms": round(chunk_round, 3),
        "rounds_ms_all": [round(r, 3) for r in rounds],
        "round_over_step": round(chunk_round / step, 3),
        "what": "ms per decode step with every row busy, and per round (a prefill chunk of a new prompt, then "
        "a decode step) on the server's ContinuousEngine; serve_llm.py's ITL goal needs rounds "
        "well under 2 steps",
    }
    log(
        f"llm rounds: decode step {step:.2f} ms, a round with a {g.prefill_chunk}-token chunk {chunk_round:.2f} ms "
        f"({res['round_over_step']}x), {g.max_batch_size} rows x {g.max_length} slots, {mode}"
    )
    return res
