"""Speculative decoding: px.Generator(speculative_config=...) against the plain px.Generator, same run.

The serving benchmark's Llama-shaped model (benchmarks/generate.py's SHAPE, random weights) is the target,
greedy, no EOS. Its upper half is scaled down to add almost nothing (each upper layer's output projections
times 1e-3): the controlled case, where a draft made of the target's lower half agrees with it. Methods:
- draft_model: that lower half (the target's embedding, first layers, norm and head, copied), k guesses;
- ngram: prompt lookup (prompt_lookup_max 3, min 1) on the same prompts: the random model's greedy output
  repeats itself, which is what the lookup finds (a trained model copying its prompt would be the real case).
For each batch: decode tokens/s (the extra tokens of a long call over its extra time, median of --repeats
after an untimed call), the speed-up over the plain generator, guesses kept per verify step, whether the
tokens equal the plain generator's, and compiles after warm-up. The verify step's cost: the k + 1-token
step (every position's logits) over the plain 1-token decode step, each jitted alone on the same cache, and
the LM head's product alone at 1 and k + 1 rows (what bounds it on XLA:CPU). Served: one client through a
server's paged engine (no HTTP), plain against prompt lookup (`--speculative-config`'s engine).

    .venv/bin/python benchmarks/speculative.py                    # batch 1 and 8 (about 10 minutes on 2 cores)
    .venv/bin/python benchmarks/speculative.py --quick            # a tiny model: checks the script runs
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
from generate import SHAPE  # noqa: E402  (the serving benchmark's model)

QUIET = 1e-3  # NOTE: the upper layers' output projections are scaled by this: they add almost nothing
TINY = dict(SHAPE, vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4, head_dim=16)
TINY.update(num_attention_heads=4, num_key_value_heads=2)


def controlled_pair(shape: dict):
    """(target, draft): the target with its upper half quieted, the draft its lower half with the same weights."""
    import paddle
    from paddleformers.transformers.llama import LlamaConfig, LlamaForCausalLM

    paddle.seed(0)
    target = LlamaForCausalLM(LlamaConfig(**shape))
    half = shape["num_hidden_layers"] // 2
    for i in range(half, shape["num_hidden_layers"]):
        layer = target.model.layers[i]
        for w in (layer.self_attn.o_proj.weight, layer.mlp.down_proj.weight):
            w.set_value(w.numpy() * QUIET)
    draft = LlamaForCausalLM(LlamaConfig(**{**shape, "num_hidden_layers": half}))
    own = target.state_dict()
    draft.set_state_dict({k: own[k] for k in draft.state_dict()})
    target.eval(), draft.eval()
    return target, draft


def decode_rate(gen, ids, new_tokens: int, repeats: int) -> dict:
    """Decode tokens/s of gen.generate on ids (greedy, no EOS), its tokens, and compiles after its warm-up."""
    from paddle_xla.runtime.compile_cache import compiles_seen

    kw = dict(decode_strategy="greedy_search", eos_token_id=-1)
    tokens, _ = gen.generate(ids, max_new_tokens=new_tokens, **kw)  # NOTE: warm-up, and the tokens compared
    gen.generate(ids, max_new_tokens=1, **kw)
    before = gen.speculative_stats
    with compiles_seen() as compiles:
        ttft = time_calls(lambda: gen.generate(ids, max_new_tokens=1, **kw), repeats)["median_ms"] / 1e3
        full = time_calls(lambda: gen.generate(ids, max_new_tokens=new_tokens, **kw), repeats)["median_ms"] / 1e3
    out = {
        "decode_tokens_per_s": ids.shape[0] * (new_tokens - 1) / (full - ttft),
        "ttft_ms": ttft * 1e3,
        "compiles_after_warmup": len(compiles),
        "tokens": tokens,
    }
    if before is not None:
        after = gen.speculative_stats
        steps = after["verify_steps"] - before["verify_steps"]
        kept = after["accepted_tokens"] - before["accepted_tokens"]
        out.update(
            verify_steps=steps,
            accepted_per_step=kept / steps,
            acceptance_rate=kept / max(1, after["guessed_tokens"] - before["guessed_tokens"]),
        )
    return out


def served_rate(engine, prompt, new_tokens: int, repeats: int) -> dict:
    """One client's decode tokens/s through a server's paged engine (begin, prefill, decode chunks, as
    serve/llm/scheduler.py drives it, without HTTP), its tokens, and compiles after its warm-up call."""
    from paddle_xla.generation.continuous import Request
    from paddle_xla.generation.slots import NO_TOKEN
    from paddle_xla.runtime.compile_cache import compiles_seen

    def once(n: int) -> list[int]:
        engine.begin(0, Request(tuple(int(t) for t in prompt), n, ignore_eos=True))
        while (done := engine.fill(0)) is None:
            pass
        made = [done[0]]
        while engine.busy[0]:
            made += [int(t) for t in engine.run_chunk()[0] if t != NO_TOKEN]
        return made

    tokens = once(new_tokens)  # NOTE: warm-up (the buckets this request runs in), and the tokens compared
    once(1)
    with compiles_seen() as compiles:
        ttft = time_calls(lambda: once(1), repeats)["median_ms"] / 1e3
        full = time_calls(lambda: once(new_tokens), repeats)["median_ms"] / 1e3
    return {
        "decode_tokens_per_s": (new_tokens - 1) / (full - ttft),
        "compiles_after_warmup": len(compiles),
        "tokens": tokens,
    }


def served(target, args) -> dict:
    """One client through the paged engine: the plain generator's and the prompt-lookup one's (a server's
    `--speculative-config`), on the batch-1 prompt; ngram's stats are the engine's counts over the timed calls."""
    from paddle_xla.api.generator import Generator

    ids = np.random.default_rng(1).integers(3, target.config.vocab_size, args.prompt_len)
    slots = args.prompt_len + args.new_tokens + args.k + 2
    spec = {"method": "ngram", "num_speculative_tokens": args.k, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    row: dict = {}
    for name, config in (("plain", None), ("ngram", spec)):
        engine = Generator(target, max_batch_size=1, max_length=slots, speculative_config=config).paged()
        got = served_rate(engine, ids, args.new_tokens, args.repeats)
        row[name] = got
        if config is not None:
            row[name].update(engine.stats.as_dict())
    same = row["ngram"].pop("tokens") == row["plain"].pop("tokens")
    speedup = row["ngram"]["decode_tokens_per_s"] / row["plain"]["decode_tokens_per_s"]
    row["ngram"].update(same_tokens=same, speedup=speedup)
    print(json.dumps({"served": row}), flush=True)
    return row


def step_cost(gen, width: int, repeats: int) -> float:
    """Median ms of the target's extend step over `width` tokens per row (width 1: the plain decode step)."""
    import jax
    import jax.numpy as jnp

    from paddle_xla import x64

    g = gen.geometry
    run = gen.engine._step if width == 1 else gen.verify_program(width)
    b, s = g.max_batch_size, g.max_length
    with x64.scope():
        weights = gen.engine._device_params()
        feeds = (
            jnp.ones((b, width), jnp.int64),
            jnp.ones((b, s + width), jnp.int64),
            jnp.tile(jnp.arange(s, s + width, dtype=jnp.int64), (b, 1)),
            jnp.zeros((2 * g.layers, b, g.kv_heads, s, g.head_dim), g.cache_dtype),
        )
        fn = jax.jit(run)
        return time_calls(lambda: jax.block_until_ready(fn(weights, *feeds)), repeats)["median_ms"]


def head_product(rows: int, shape: dict, repeats: int) -> float:
    """Median ms of the LM head's product alone, [rows, hidden] x [vocab, hidden]^T (the decode step's [N, K]
    layout): what XLA:CPU's matmul costs for a few rows against one (the verify step's bound)."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((shape["vocab_size"], shape["hidden_size"]), np.float32))
    x = jnp.asarray(rng.standard_normal((rows, shape["hidden_size"]), np.float32))
    fn = jax.jit(lambda x, w: jnp.einsum("mk,nk->mn", x, w))
    return time_calls(lambda: jax.block_until_ready(fn(x, w)), repeats)["median_ms"]


def measure(target, draft, batch: int, args) -> dict:
    from paddle_xla.api.generator import Generator

    rng = np.random.default_rng(batch)
    ids = rng.integers(3, target.config.vocab_size, (batch, args.prompt_len)).astype("int64")
    slots = args.prompt_len + args.new_tokens + args.k + 2
    make = lambda spec: Generator(target, max_batch_size=batch, max_length=slots, speculative_config=spec)  # noqa: E731
    plain = make(None)
    base = decode_rate(plain, ids, args.new_tokens, args.repeats)
    row = {"batch": batch, "plain": {k: v for k, v in base.items() if k != "tokens"}}
    specs = {
        "draft_model": {"method": "draft_model", "model": draft, "num_speculative_tokens": args.k},
        "ngram": {"method": "ngram", "num_speculative_tokens": args.k, "prompt_lookup_max": 3, "prompt_lookup_min": 1},
    }
    for name, spec in specs.items():
        got = decode_rate(make(spec), ids, args.new_tokens, args.repeats)
        same = bool((got.pop("tokens") == base["tokens"]).all())
        row[name] = {**got, "same_tokens": same, "speedup": got["decode_tokens_per_s"] / base["decode_tokens_per_s"]}
    one, verify = step_cost(plain, 1, 3 * args.repeats), step_cost(plain, args.k + 1, 3 * args.repeats)
    row["step_ms"], row["verify_ms"], row["verify_over_step"] = one, verify, verify / one
    draft_gen = Generator(draft, max_batch_size=batch, max_length=slots)
    row["draft_step_ms"] = step_cost(draft_gen, 1, 3 * args.repeats)
    row["draft_over_step"] = row["draft_step_ms"] / one
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="*", default=[1, 8], help="none: the served comparison alone")
    ap.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "speculative.json"))
    args = ap.parse_args()
    shape = TINY if args.quick else SHAPE
    if args.quick:
        args.prompt_len, args.new_tokens, args.repeats = 16, 24, 1
    target, draft = controlled_pair(shape)
    params = sum(int(np.prod(p.shape)) for p in target.parameters()) / 1e6
    draft_params = sum(int(np.prod(p.shape)) for p in draft.parameters()) / 1e6
    rows = [measure(target, draft, b, args) for b in args.batches]
    one_client = served(target, args)
    head = {m: head_product(m, shape, 10 * args.repeats) for m in sorted({1, args.k + 1, *args.batches})}
    result = {
        "model": f"PaddleFormers LlamaForCausalLM, random weights, {params:.0f}M parameters, upper half x {QUIET}",
        "draft": f"its lower {shape['num_hidden_layers'] // 2} layers, {draft_params:.0f}M parameters",
        "shape": shape,
        "k": args.k,
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "rows": rows,
        "served_one_client": one_client,
        "head_product_ms_by_rows": head,
        "threads": os.cpu_count(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\n{result['model']}; draft: {result['draft']}; k = {args.k}\n")
    print("| batch | plain tok/s | method | tok/s | speed-up | kept per verify step | same tokens | compiles |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        for m in ("draft_model", "ngram"):
            s = r[m]
            print(
                f"| {r['batch']} | {r['plain']['decode_tokens_per_s']:.1f} | {m} | {s['decode_tokens_per_s']:.1f} | "
                f"{s['speedup']:.2f}x | {s['accepted_per_step']:.2f} | {s['same_tokens']} | "
                f"{s['compiles_after_warmup']} |"
            )
    for r in rows:
        print(
            f"batch {r['batch']}: a {args.k + 1}-token verify step {r['verify_ms']:.2f} ms = "
            f"{r['verify_over_step']:.2f}x "
            f"the 1-token step ({r['step_ms']:.2f} ms); a draft step {r['draft_over_step']:.2f}x"
        )
    p, n = one_client["plain"], one_client["ngram"]
    print(
        f"served, one client (paged engine): plain {p['decode_tokens_per_s']:.1f} tok/s, ngram "
        f"{n['decode_tokens_per_s']:.1f} tok/s ({n['speedup']:.2f}x, {n['accepted_per_step']:.2f} kept per verify "
        f"step, same tokens {n['same_tokens']}, compiles {n['compiles_after_warmup']})"
    )
    print(
        "the LM head's product alone: "
        + ", ".join(f"{m} rows {ms:.2f} ms ({ms / head[1]:.2f}x)" for m, ms in head.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
