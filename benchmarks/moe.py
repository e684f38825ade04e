"""A mixture-of-experts layer's cost and routing, in one run, JSON out (issue 56).

1. **Compute follows the chosen experts.** `paddle_xla.sparse_moe` (ops/moe.py: tokens sorted by expert, run
   tile by tile through their own expert) against the same layer run densely (every expert on every token,
   weighted by the same routing), both jitted, forward and forward + backward, at the MoE layer of a
   Qwen3-MoE-shaped model of about 100M parameters (hidden 512, 8 experts of 1024, top-2) for several token
   counts: a training batch (2048 tokens), a prompt, decode steps of 8 and 1 rows. Goal at 2048 tokens:
   the layer's time <= 0.4x the dense one's.
2. **Near-tie flips.** How often Paddle's float32 routing (softmax of the router logits, paddle.topk) and
   paddle_xla's (jax) choose different experts for the same token, on random router inputs: the rounding of
   two float32 implementations decides a near tie; the parity tests compare where no near tie decides.
3. **The model** (Qwen3MoeForCausalLMDeprecated, about 100M parameters: 6 layers of hidden 512, 8 experts of
   1024, top-2, vocabulary 32000): an AdamW training step on its own loss (batch 4 x 256) against
   PaddleFormers eager's (its better of 1 and all threads; goal >= 3x), and greedy decode at batch 1 and 8
   against PaddleFormers' eager generate (benchmarks/generate.py's paddle_side; goals >= 3x and >= 5x).

    .venv/bin/python benchmarks/moe.py            # writes benchmarks/results/moe.json (10-20 minutes)
    .venv/bin/python benchmarks/moe.py --quick    # smaller shapes: checks the script
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = dict(hidden=512, intermediate=1024, experts=8, top_k=2)
QUICK = dict(hidden=64, intermediate=128, experts=8, top_k=2)


def _attrs(shape) -> dict:
    return dict(
        num_experts=shape["experts"],
        top_k=shape["top_k"],
        norm_topk_prob=True,
        scoring="softmax",
        norm_add=0.0,
        norm_min=0.0,
        routed_scaling=1.0,
        n_group=1,
        topk_group=1,
        fused_gate_up=True,
        correction_bias=False,
    )


def _dense(shape):
    """The same layer with every expert run on every token, weighted by the same routing."""
    import jax
    import jax.numpy as jnp

    from paddle_xla.ops.moe import route

    def layer(x, gate_w, *weights):
        weights_k, chosen = route(x @ gate_w, shape["top_k"], True)
        combine = jnp.sum(jax.nn.one_hot(chosen, shape["experts"]) * weights_k[..., None], axis=1)
        out = jnp.zeros_like(x)
        for e in range(shape["experts"]):
            gate, up = jnp.split(x @ weights[2 * e], 2, axis=-1)
            out = out + combine[:, e : e + 1] * ((jax.nn.silu(gate) * up) @ weights[2 * e + 1])
        return out

    return layer


def _best_ms(fn, args, repeats: int) -> float:
    out = fn(*args)  # NOTE: compiles
    (out[0] if isinstance(out, tuple) else out).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(*args)
        (out[0] if isinstance(out, tuple) else out).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def layer_cost(shape, tokens: list[int], repeats: int) -> list[dict]:
    import jax
    import jax.numpy as jnp

    from paddle_xla.ops.moe import sparse_moe

    rng = np.random.default_rng(0)
    h, i, e = shape["hidden"], shape["intermediate"], shape["experts"]
    gate_w = jnp.asarray(rng.standard_normal((h, e)) * 0.05, jnp.float32)
    weights = []
    for _ in range(e):
        weights += [jnp.asarray(rng.standard_normal((h, 2 * i)) * 0.02, jnp.float32)]
        weights += [jnp.asarray(rng.standard_normal((i, h)) * 0.02, jnp.float32)]
    attrs = _attrs(shape)

    def grouped(x, gate_w, *weights):
        return sparse_moe(x, gate_w, *weights, **attrs)[0]

    rows = []
    for t in tokens:
        x = jnp.asarray(rng.standard_normal((t, h)), jnp.float32)
        args = (x, gate_w, *weights)
        row = {"tokens": t}
        for name, fn in (("grouped", grouped), ("dense", _dense(shape))):
            row[f"{name}_forward_ms"] = _best_ms(jax.jit(fn), args, repeats)
            grad = jax.jit(jax.grad(lambda *a, fn=fn: jnp.sum(fn(*a) ** 2), argnums=tuple(range(len(args)))))
            row[f"{name}_forward_backward_ms"] = _best_ms(grad, args, repeats)
        row["forward_ratio"] = row["grouped_forward_ms"] / row["dense_forward_ms"]
        row["forward_backward_ratio"] = row["grouped_forward_backward_ms"] / row["dense_forward_backward_ms"]
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def routing_flips(shape, tokens: int, trials: int) -> dict:
    """Tokens whose chosen experts differ between Paddle's float32 routing and paddle_xla's, on the same inputs."""
    import jax.numpy as jnp
    import paddle

    from paddle_xla.ops.moe import route

    rng = np.random.default_rng(1)
    flipped = total = 0
    for _ in range(trials):
        x = rng.standard_normal((tokens, shape["hidden"])).astype("float32")
        w = (rng.standard_normal((shape["hidden"], shape["experts"])) * 0.05).astype("float32")
        probs = paddle.nn.functional.softmax(paddle.matmul(paddle.to_tensor(x), paddle.to_tensor(w)), axis=-1)
        theirs = np.sort(paddle.topk(probs, shape["top_k"], axis=-1)[1].numpy(), axis=-1)
        ours = np.sort(np.asarray(route(jnp.asarray(x) @ jnp.asarray(w), shape["top_k"], True)[1]), axis=-1)
        flipped += int(np.any(theirs != ours, axis=-1).sum())
        total += tokens
    return {"tokens": total, "flipped": flipped, "rate": flipped / total}


MODEL = dict(
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=1024,
    moe_intermediate_size=1024,
    num_hidden_layers=6,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=64,
    max_position_embeddings=1024,
    num_experts=8,
    num_experts_per_tok=2,
    fuse_rms_norm=False,
)


def _qwen3_moe(shape: dict):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import paddle
    from generation.paddleformers import moe, moe_config

    paddle.seed(0)
    net = moe("qwen3_moe").Qwen3MoeForCausalLMDeprecated(moe_config("qwen3_moe").Qwen3MoeConfig(**shape))
    return net


def _paddle_step_s(net, ids, labels, repeats: int) -> dict:
    """PaddleFormers eager's AdamW training step at its better of 1 and all threads (median seconds)."""
    import paddle

    opt = paddle.optimizer.AdamW(1e-4, parameters=net.parameters())
    tried = {}
    for threads in sorted({1, os.cpu_count() or 1}):
        paddle.base.core.set_num_threads(threads)
        times = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            loss = net(paddle.to_tensor(ids), labels=paddle.to_tensor(labels), return_dict=True).loss
            loss.backward()
            opt.step()
            opt.clear_grad()
            times.append(time.perf_counter() - start)
        tried[threads] = float(np.median(times[1:]))
    paddle.base.core.set_num_threads(os.cpu_count() or 1)
    return {"step_s": min(tried.values()), "by_threads": tried}


def model_figures(shape: dict, batch: int, seq: int, decode: list[int], new_tokens: int, repeats: int) -> dict:
    """Training step and greedy decode of the Qwen3-MoE-shaped model against PaddleFormers eager."""
    import paddle
    from generate import paddle_side

    import paddle_xla as px

    rng = np.random.default_rng(0)
    ids = rng.integers(3, shape["vocab_size"], (batch, seq)).astype("int64")
    labels = np.roll(ids, -1, axis=1)
    net = _qwen3_moe(shape)
    params = sum(int(np.prod(p.shape)) for p in net.parameters())
    net.train()
    theirs = _paddle_step_s(net, ids, labels, repeats)
    net = _qwen3_moe(shape)
    net.train()
    specs = (
        [paddle.static.InputSpec([batch, seq], "int64", "input_ids")],
        [paddle.static.InputSpec([batch, seq], "int64", "labels")],
    )
    step = px.train_step(net, None, paddle.optimizer.AdamW(1e-4, parameters=net.parameters()), *specs)
    step(ids, labels)  # NOTE: compiles
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(ids, labels)
        times.append(time.perf_counter() - start)
    ours = float(np.median(times))
    train = {"batch": batch, "seq": seq, "paddle": theirs, "paddle_xla_step_s": ours, "ratio": theirs["step_s"] / ours}
    print(json.dumps({"train": train}), flush=True)
    net = _qwen3_moe(shape)
    net.eval()
    rows = []
    for b in decode:
        prompt = rng.integers(3, shape["vocab_size"], (b, 32)).astype("int64")
        gen = px.Generator(net, max_batch_size=b, max_length=32 + new_tokens)
        kw = dict(decode_strategy="greedy_search", eos_token_id=-1)
        gen.generate(prompt, max_new_tokens=new_tokens, **kw)
        one, full = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            gen.generate(prompt, max_new_tokens=1, **kw)
            one.append(time.perf_counter() - start)
            start = time.perf_counter()
            gen.generate(prompt, max_new_tokens=new_tokens, **kw)
            full.append(time.perf_counter() - start)
        ours_s = float(np.median(full) - np.median(one))
        paddle_r = paddle_side(net, prompt, new_tokens, max(1, repeats // 2))
        theirs_s = paddle_r["full"] - paddle_r["ttft"]
        row = {
            "batch": b,
            "new_tokens": new_tokens,
            "paddle_xla_decode_tokens_per_s": b * (new_tokens - 1) / ours_s,
            "paddleformers_decode_tokens_per_s": b * (new_tokens - 1) / theirs_s,
            "paddleformers_threads": paddle_r["threads"],
        }
        row["ratio"] = row["paddle_xla_decode_tokens_per_s"] / row["paddleformers_decode_tokens_per_s"]
        print(json.dumps({"decode": row}), flush=True)
        rows.append(row)
    return {"parameters": params, "shape": shape, "train": train, "decode": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "moe.json"))
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    from benchmarks.common import machine_info

    shape = QUICK if args.quick else SHAPE
    tokens = [1, 8, 64] if args.quick else [1, 8, 512, 2048]
    layer = layer_cost(shape, tokens, 2 if args.quick else args.repeats)
    flips = routing_flips(shape, 256 if args.quick else 4096, 2 if args.quick else 25)
    print(json.dumps({"routing_flips": flips}), flush=True)
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    quick_model = dict(
        MODEL,
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=64,
        num_hidden_layers=2,
        head_dim=16,
    )
    model = model_figures(
        quick_model if args.quick else MODEL,
        *((2, 16, [1], 4) if args.quick else (4, 256, [1, 8], 32)),
        2 if args.quick else args.repeats,
    )
    largest = layer[-1]
    result = {
        "machine": machine_info(),
        "layer_shape": shape,
        "layer": layer,
        "routing_flips": flips,
        "model": model,
        "goals": {
            "layer_forward_ratio_at_most_tokens": largest["forward_ratio"],
            "train_vs_paddleformers_eager": model["train"]["ratio"],
            "decode_vs_paddleformers_eager": {r["batch"]: r["ratio"] for r in model["decode"]},
            "targets": {"layer": "<= 0.4", "train": ">= 3", "decode": {"1": ">= 3", "8": ">= 5"}},
        },
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print("| tokens | grouped fwd ms | dense fwd ms | ratio | grouped fwd+bwd ms | dense fwd+bwd ms | ratio |")
    print("|---|---|---|---|---|---|---|")
    for r in layer:
        fwd = f"{r['grouped_forward_ms']:.2f} | {r['dense_forward_ms']:.2f} | {r['forward_ratio']:.2f}x"
        both = f"{r['grouped_forward_backward_ms']:.2f} | {r['dense_forward_backward_ms']:.2f}"
        print(f"| {r['tokens']} | {fwd} | {both} | {r['forward_backward_ratio']:.2f}x |")
    print(f"routing flips: {flips['flipped']} of {flips['tokens']} tokens ({flips['rate']:.2e})")
    print(
        f"model: {model['parameters'] / 1e6:.0f}M parameters; training step {model['train']['ratio']:.2f}x "
        f"PaddleFormers eager; decode " + ", ".join(f"batch {r['batch']} {r['ratio']:.2f}x" for r in model["decode"])
    )


if __name__ == "__main__":
    main()
