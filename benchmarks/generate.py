"""Text generation: px.Generator against PaddleFormers' eager `model.generate` (with its KV cache).

A Llama-shaped PaddleFormers model with random weights (about 124M parameters: hidden 768, 12 layers,
12 heads, 4 KV heads, MLP 2048, vocabulary 32000), greedy decoding of the same prompts in the same run.
For each batch size and precision (fp32, and bf16: px.Strategy(precision="bf16"), matmul weights held in
bf16 and a bf16 KV cache) it reports time to first token (a max_new_tokens=1 call), decode tokens/s (the
extra tokens of a longer call over its extra time), XLA compiles after warm-up (must be 0), and the
memory-bandwidth use of a decode step: the bytes it must read (every weight as the step holds it, but
an untied embedding table, of which it gathers one row per token, plus the KV cache) times steps/s,
over this machine's copy bandwidth measured in the same run. A "bf16-int8" row adds
Strategy(quant_type="weight_only_int8"): the matmul weights as int8 values and per-channel scales.
Paddle runs fp32, its fastest on a CPU, at its best thread setting (core.set_num_threads 1 or all
cores, the faster decode of the two, both recorded); every precision is compared with it.

    .venv/bin/python benchmarks/generate.py                  # batch 1, 8 and 32 (about 20 minutes on 2 cores)
    .venv/bin/python benchmarks/generate.py --batches 1 --new-tokens 16 --precisions fp32

PaddleFormers comes from `paddle-xla install paddleformers`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
from common import time_calls  # noqa: E402  (benchmarks/common.py)

SHAPE = dict(
    vocab_size=32000,
    hidden_size=768,
    intermediate_size=2048,
    num_hidden_layers=12,
    num_attention_heads=12,
    num_key_value_heads=4,
    head_dim=64,
    max_position_embeddings=512,
    fuse_rms_norm=False,
)


def copy_bandwidth(mb: int = 512) -> float:
    """Bytes/s of a large host memory copy (read + write counted once each: what a step's reads compete with)."""
    a = np.ones(mb * 2**20 // 4, np.float32)
    b = np.empty_like(a)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        np.copyto(b, a)
        times.append(time.perf_counter() - start)
    return 2 * a.nbytes / min(times)


def median_time(fn, repeats: int) -> float:
    return time_calls(fn, repeats)["median_ms"] / 1e3


def prompts(batch: int, length: int):
    rng = np.random.default_rng(0)
    return rng.integers(3, SHAPE["vocab_size"], (batch, length)).astype("int64")


def paddle_side(net, ids, new_tokens: int, repeats: int) -> dict:
    """PaddleFormers' eager generate on these prompts at its best thread setting: the TTFT, full-call time
    and tokens of the setting with the faster decode, and every setting's decode time."""
    import paddle

    tried = {}
    for threads in sorted({1, os.cpu_count() or 1}):
        paddle.base.core.set_num_threads(threads)
        tried[threads] = paddle_run(net, ids, new_tokens, repeats)
    paddle.base.core.set_num_threads(os.cpu_count() or 1)
    best = min(tried, key=lambda t: tried[t]["full"] - tried[t]["ttft"])
    return {**tried[best], "threads": best, "decode_s_by_threads": {t: r["full"] - r["ttft"] for t, r in tried.items()}}


def paddle_run(net, ids, new_tokens: int, repeats: int) -> dict:
    import paddle

    pids, pmask = paddle.to_tensor(ids), paddle.to_tensor(np.ones_like(ids))

    def paddle_generate(n):
        return net.generate(
            pids, attention_mask=pmask, max_new_tokens=n, decode_strategy="greedy_search", eos_token_id=-1
        )[0].numpy()

    return {
        "ttft": median_time(lambda: paddle_generate(1), repeats),
        "full": median_time(lambda: paddle_generate(new_tokens), repeats),
        "tokens": paddle_generate(new_tokens),
    }


def step_bytes(gen, batch: int, slots: int) -> int:
    """What one decode step must read: every weight as the generator holds it, and the whole KV cache in
    its dtype. The embedding table is left out when the LM head has its own weight (the step gathers
    one row of it per token); with tied weights (PaddleFormers' default here) the head reads it whole."""
    import jax

    held = gen.engine._device_params()
    vocab = [k for k, v in held.items() if hasattr(v, "ndim") and v.ndim == 2 and SHAPE["vocab_size"] in v.shape]
    # NOTE: the embedding is [vocab, hidden]; a head held as [N, K] (gen.held.nk) is that shape too
    gathered = (
        [k for k in vocab if held[k].shape[0] == SHAPE["vocab_size"] and k not in gen.held.nk] if len(vocab) > 1 else []
    )
    # NOTE: leaf by leaf: an int8-held weight is its values and its scales
    weights = sum(leaf.nbytes for k, v in held.items() if k not in gathered[:1] for leaf in jax.tree.leaves(v))
    itemsize = np.dtype(gen.geometry.cache_dtype).itemsize
    return (
        weights
        + 2 * SHAPE["num_hidden_layers"] * batch * SHAPE["num_key_value_heads"] * slots * SHAPE["head_dim"] * itemsize
    )


def strategy_for(row: str):
    """ "fp32", "bf16", or "bf16-int8" (bf16 compute, weight-only int8 matmul weights)."""
    import paddle_xla as px

    precision, _, quant = row.partition("-")
    return px.Strategy(precision=precision, quant_type="weight_only_int8" if quant == "int8" else None)


def measure(
    net, precision: str, batch: int, prompt_len: int, new_tokens: int, repeats: int, bandwidth: float, paddle: dict
) -> dict:
    from paddle_xla.api.generator import Generator
    from paddle_xla.runtime.compile_cache import compiles_seen

    ids = prompts(batch, prompt_len)
    mask = np.ones_like(ids)
    slots = 2 * (prompt_len + new_tokens)
    gen = Generator(net, max_batch_size=batch, max_length=slots, strategy=strategy_for(precision))
    kw = dict(attention_mask=mask, decode_strategy="greedy_search", eos_token_id=-1)
    gen.generate(ids, max_new_tokens=new_tokens, **kw)  # warm-up: compiles
    with compiles_seen() as compiles:
        ttft = median_time(lambda: gen.generate(ids, max_new_tokens=1, **kw), repeats)
        full = median_time(lambda: gen.generate(ids, max_new_tokens=new_tokens, **kw), repeats)
    ours, _ = gen.generate(ids, max_new_tokens=new_tokens, **kw)
    steps = new_tokens - 1
    ours_tps, paddle_tps = batch * steps / (full - ttft), batch * steps / (paddle["full"] - paddle["ttft"])
    nbytes = step_bytes(gen, batch, slots)
    return {
        "precision": precision,
        "batch": batch,
        "prompt_len": prompt_len,
        "new_tokens": new_tokens,
        "same_tokens_as_paddle": float((paddle["tokens"] == ours).mean()),
        "paddle_threads": paddle["threads"],
        "paddle_decode_s_by_threads": paddle["decode_s_by_threads"],
        "ttft_ms": ttft * 1e3,
        "paddle_ttft_ms": paddle["ttft"] * 1e3,
        "decode_tokens_per_s": ours_tps,
        "paddle_decode_tokens_per_s": paddle_tps,
        "decode_speedup": ours_tps / paddle_tps,
        "compiles_after_warmup": len(compiles),
        "bytes_per_step": nbytes,
        "bandwidth_use": nbytes * (ours_tps / batch) / bandwidth,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "bf16-int8"])
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "generate.json"))
    args = ap.parse_args()
    import paddle
    from paddleformers.transformers.llama import LlamaConfig, LlamaForCausalLM

    paddle.seed(0)
    net = LlamaForCausalLM(LlamaConfig(**SHAPE))
    net.eval()
    params = sum(int(np.prod(p.shape)) for p in net.parameters())
    bandwidth = copy_bandwidth()
    rows = []
    for b in args.batches:
        theirs = paddle_side(net, prompts(b, args.prompt_len), args.new_tokens, args.repeats)
        rows += [
            measure(net, p, b, args.prompt_len, args.new_tokens, args.repeats, bandwidth, theirs)
            for p in args.precisions
        ]
    result = {
        "model": f"PaddleFormers LlamaForCausalLM, random weights, {params / 1e6:.0f}M parameters",
        "shape": SHAPE,
        "paddle_precision": "fp32",
        "copy_bandwidth_GBps": bandwidth / 1e9,
        "threads": os.cpu_count(),
        "rows": rows,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(
        f"{result['model']}, prompt {args.prompt_len}, {args.new_tokens} new tokens, "
        f"copy bandwidth {bandwidth / 1e9:.1f} GB/s\n"
    )
    print(
        "| precision | batch | TTFT ms (Paddle fp32) | decode tok/s (Paddle fp32) | speed-up | bandwidth use | "
        "compiles | tokens as Paddle's | Paddle threads |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['precision']} | {r['batch']} | {r['ttft_ms']:.0f} ({r['paddle_ttft_ms']:.0f}) "
            ""
            f"| {r['decode_tokens_per_s']:.1f} "
            f"({r['paddle_decode_tokens_per_s']:.1f}) | {r['decode_speedup']:.2f}x | {r['bandwidth_use']:.0%} | "
            f"{r['compiles_after_warmup']} | {r['same_tokens_as_paddle']:.0%} | {r['paddle_threads']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
