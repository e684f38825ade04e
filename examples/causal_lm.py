"""Causal language modelling: a GPT-2-style decoder trained on Python's own documentation.

    python examples/causal_lm.py           # GPT-2 small: 12 layers, 768 wide, 12 heads, 1024 context
    python examples/causal_lm.py --tiny    # 2 layers, 64 wide: runs in seconds (CI)

1. Train a byte-level BPE tokenizer on the pydoc topic pages that ship with Python (no download).
2. Train the decoder with px.train_step: Paddle's AdamW, clipping and LR schedule, compiled by XLA.
3. Train a copy natively in Paddle on the same batches from the same weights, and compare the losses.
4. Report validation perplexity, then generate greedily with px.compile (one fixed-shape executable).
"""

import argparse
import copy
import math
import time

import numpy as np
import paddle

import paddle_xla as px
from paddle_xla.models.gpt import GPT, GPTConfig, TokenStream, greedy_generate, lm_loss, train_tokenizer

CONFIGS = {  # model preset, tokens per window, batch, steps, peak LR, steps compared with native Paddle
    "tiny": dict(model="tiny", seq=32, batch=8, steps=200, lr=3e-3, compare=5),
    "full": dict(model="gpt2-small", seq=256, batch=8, steps=300, lr=6e-4, compare=3),
}


def optimizer(net, c):
    warmup = max(1, c["steps"] // 10)
    sched = paddle.optimizer.lr.LinearWarmup(
        paddle.optimizer.lr.CosineAnnealingDecay(c["lr"], T_max=c["steps"]), warmup, 0.0, c["lr"]
    )
    return paddle.optimizer.AdamW(
        sched, parameters=net.parameters(), weight_decay=0.1, beta2=0.95, grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0)
    )


def native_losses(net, batches, c):
    """The same training natively in Paddle (eager), for the parity check."""
    opt = optimizer(net, c)
    losses = []
    for x, y in batches:
        loss = lm_loss(net(paddle.to_tensor(x)), paddle.to_tensor(y))
        loss.backward()
        opt.step()
        opt.clear_grad()
        opt._learning_rate.step()
        losses.append(float(loss))
    return losses


def perplexity(model, data, c, n_batches=4):
    """exp(mean next-token loss) on held-out windows, through an inference executable."""
    nll = []
    for _ in range(n_batches):
        x, y = data.batch(c["batch"], "val")
        z = model(x)
        z = z - z.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        nll.append(-np.take_along_axis(logp, y[..., None], -1).mean())
    return math.exp(float(np.mean(nll)))


def main(tiny=False, steps=None, seed=0):
    c = dict(CONFIGS["tiny" if tiny else "full"])
    c["steps"] = steps or c["steps"]
    cfg = GPTConfig.named(c["model"])
    tokenizer = train_tokenizer(cfg.vocab_size)
    data = TokenStream(tokenizer, cfg, c["seq"], seed)
    print(
        f"GPT '{cfg.name}': {cfg.n_layer} layers, width {cfg.n_embd}, {cfg.n_head} heads; "
        f"{len(data.train):,} training tokens, BPE vocab {tokenizer.get_vocab_size()}"
    )

    paddle.seed(seed)
    net = GPT(cfg)
    native = copy.deepcopy(net)  # NOTE: same initial weights for the native comparison
    batches = [data.batch(c["batch"]) for _ in range(c["steps"])]
    step = px.train_step(
        net, lm_loss, optimizer(net, c), GPT.input_spec(c["batch"], c["seq"]), GPT.label_spec(c["batch"], c["seq"])
    )

    t0, losses = time.perf_counter(), []
    for i, (x, y) in enumerate(batches):
        losses.append(step(x, y))
        if i % max(1, c["steps"] // 10) == 0 or i == c["steps"] - 1:
            print(f"step {i:4d}  loss {losses[-1]:.4f}")
    train_s = time.perf_counter() - t0
    step.sync_to(net)  # trained weights back into the paddle Layer

    ref = native_losses(native, batches[: c["compare"]], c)
    rel = max(abs(a - b) / abs(b) for a, b in zip(losses, ref))
    print(f"paddle_xla vs native Paddle, first {len(ref)} steps: max relative loss difference {rel:.2e}")

    net.eval()
    model = px.compile(net, GPT.input_spec(c["batch"], c["seq"]))
    ppl = perplexity(model, data, c)
    n = tokenizer.get_vocab_size()
    print(f"validation perplexity {ppl:.1f} (a uniform guess among the tokenizer's {n} tokens scores {n})")

    gen = px.compile(net, GPT.input_spec(1, c["seq"]))
    prompt = tokenizer.encode("The for statement").ids
    text = tokenizer.decode(greedy_generate(gen, prompt, n_new=12, ctx=c["seq"]))
    print(f"greedy continuation of 'The for statement': {text!r}")
    print(f"{c['steps']} steps in {train_s:.1f} s (first step includes compilation)")
    return {
        "losses": losses,
        "native_losses": ref,
        "max_rel_diff": rel,
        "perplexity": ppl,
        "vocab": tokenizer.get_vocab_size(),
        "generated": text,
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="the small CI configuration")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the config's)")
    a = p.parse_args()
    main(tiny=a.tiny, steps=a.steps)
