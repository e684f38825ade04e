"""Training step time: BERT-Base pretraining (seq 128, batch 8), paddle_xla (fp32 and bf16) against
native Paddle (eager and to_static; the fastest is the baseline)
in the same run, with MFU against the matmul peak measured in the same run.

    .venv/bin/python benchmarks/train.py [--config base|small|tiny] [--batch 8] [--repeats 5]

BERT's four configurations are built first, then timed one step each per round, --repeats rounds
(bench.time_interleaved): this shared machine's speed drifts over minutes, and interleaving gives every
configuration the same drift.

The MLM head scores the masked positions only, 20 per sequence (BERT's max_predictions_per_seq at
seq 128, as in PaddleNLP, Google's, NVIDIA's and Graphcore's pretraining); --max-predictions 0 scores
every token. Model FLOPs per step = 3 x forward, the forward being the encoder plus the MLM head over
the scored tokens: 6 x matmul params x tokens + attention (paddle_xla.planner.perf.bert_pretraining_flops). The
steps are paddle_xla.bench's (the `paddle-xla bench` command), run here with a fixed set of configurations."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import machine_info, resnet50_flops


def builders(b, s):
    """Configuration -> builder of its step: Paddle's two and paddle_xla's two (no Paddle AMP baseline:
    it is fp32 on CPU, see bench.paddle_train_step)."""
    xla = lambda precision: lambda: b.xla_train_step(dataclasses.replace(s, strategy={"precision": precision}))[0]  # noqa: E731
    return {
        "paddle_eager": lambda: b.paddle_train_step(s, static=False),
        "paddle_to_static": lambda: b.paddle_train_step(s, static=True),
        "paddle_xla_fp32": xla("fp32"),
        "paddle_xla_bf16": xla("bf16"),
    }


# ---- ResNet-50 (batch 8, 224 x 224): Momentum + L2, cross entropy --------------------------------


# multiply-adds per 224x224 image, as published (the MobileNetV3 paper)
MOBILE_MACS = {"mobilenet_v3_large": 219e6, "mobilenet_v3_small": 56e6}
CNNS = ("resnet50", *MOBILE_MACS)


def _cnn_flops(name: str, batch: int) -> float:
    return resnet50_flops(batch) if name == "resnet50" else 2 * MOBILE_MACS[name] * batch


def _resnet(batch: int, name: str = "resnet50"):
    import numpy as np
    import paddle

    paddle.seed(0)
    net = getattr(paddle.vision.models, name)()
    opt = paddle.optimizer.Momentum(
        0.01, momentum=0.9, parameters=net.parameters(), weight_decay=paddle.regularizer.L2Decay(1e-4)
    )
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 3, 224, 224)).astype("float32")
    y = rng.integers(0, 1000, (batch,)).astype("int64")
    return net, opt, x, y


def resnet_paddle(b, batch: int, repeats: int, static: bool, name: str = "resnet50"):
    import paddle
    from paddle.static import InputSpec

    net, opt, x, y = _resnet(batch, name)
    net.train()
    if static:
        net = paddle.jit.to_static(net, input_spec=[InputSpec([None, 3, 224, 224], "float32", "x")], full_graph=True)
    ce = paddle.nn.CrossEntropyLoss()
    xt, yt = paddle.to_tensor(x), paddle.to_tensor(y)

    def step():
        loss = ce(net(xt), yt)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return float(loss)

    return b.time_calls(step, repeats)


def resnet_xla(b, batch: int, repeats: int, precision: str, name: str = "resnet50"):
    import numpy as np
    import paddle
    from paddle.static import InputSpec

    import paddle_xla as px

    net, opt, x, y = _resnet(batch, name)
    step = px.train_step(
        net,
        paddle.nn.CrossEntropyLoss(),
        opt,
        [InputSpec([None, 3, 224, 224], "float32", "x")],
        [InputSpec([None], "int64", "label")],
        strategy=px.Strategy(precision=precision),
    )
    return b.time_calls(lambda: np.asarray(step(x, y)), repeats)


def resnet_results(b, batch: int, repeats: int, peak_gflops: float, model: str = "resnet50") -> dict:
    """Step times, samples/s, MFU and the speed-up over Paddle's best (eager or to_static)."""
    jobs = {
        "paddle_eager": lambda: resnet_paddle(b, batch, repeats, static=False, name=model),
        "paddle_to_static": lambda: resnet_paddle(b, batch, repeats, static=True, name=model),
        "paddle_xla_fp32": lambda: resnet_xla(b, batch, repeats, "fp32", model),
        "paddle_xla_bf16": lambda: resnet_xla(b, batch, repeats, "bf16", model),
    }
    return timed(b, model, jobs, batch, 3 * _cnn_flops(model, batch), peak_gflops)


def timed(b, model: str, jobs: dict, batch: int, flops: float, peak_gflops: float) -> dict:
    """Each configuration's timing with its rates, then the speed-ups over Paddle's best."""
    out = {}
    for name, job in jobs.items():
        print(f"timing {model} {name} ...", flush=True)
        try:
            r = job()
        except Exception as e:  # NOTE: one failing configuration must not lose the others' figures
            out[name] = {"error": f"{type(e).__name__}: {e}"[:800]}
            continue
        b.add_rates(r, batch, flops, peak_gflops)
        out[name] = r
    b._ratios(out)
    return out


# ---- a Llama-shaped causal LM of ~94M parameters (PaddleFormers' LlamaForCausalLM), its own loss ----------

LLAMA = dict(
    vocab_size=16384,
    hidden_size=768,
    intermediate_size=2048,
    num_hidden_layers=12,
    num_attention_heads=12,
    num_key_value_heads=4,
    max_position_embeddings=2048,
    fuse_rms_norm=False,
    use_cache=False,
)


def _llama(batch: int, seq: int):
    import numpy as np
    import paddle
    from paddleformers.transformers.llama import LlamaConfig, LlamaForCausalLM

    paddle.seed(0)
    net = LlamaForCausalLM(LlamaConfig(**LLAMA))
    net.train()
    opt = paddle.optimizer.AdamW(3e-4, parameters=net.parameters(), weight_decay=0.01)
    ids = np.random.default_rng(0).integers(3, LLAMA["vocab_size"], (batch, seq)).astype("int64")
    return net, opt, ids, np.roll(ids, -1, axis=1)


def llama_flops(batch: int, seq: int, params: int) -> float:
    """Model FLOPs of one training step: 6 x matmul params x tokens + causal attention's score and value
    products (12 x layers x hidden x seq per token, halved for the causal mask)."""
    tokens = batch * seq
    return tokens * (6 * params + 6 * LLAMA["num_hidden_layers"] * LLAMA["hidden_size"] * seq)


def llama_paddle(b, batch: int, seq: int, repeats: int):
    import paddle

    net, opt, ids, labels = _llama(batch, seq)
    x, y = paddle.to_tensor(ids), paddle.to_tensor(labels)

    def step():
        loss = net(x, labels=y)[0]
        loss.backward()
        opt.step()
        opt.clear_grad()
        return float(loss)

    return b.time_calls(step, repeats)


def llama_xla(b, batch: int, seq: int, repeats: int, precision: str):
    import numpy as np
    from paddle.static import InputSpec

    import paddle_xla as px

    net, opt, ids, labels = _llama(batch, seq)
    step = px.train_step(
        net,
        None,
        opt,
        [InputSpec([batch, seq], "int64", "input_ids")],
        [InputSpec([batch, seq], "int64", "labels")],
        strategy=px.Strategy(precision=precision),
    )
    return b.time_calls(lambda: np.asarray(step(ids, labels)), repeats)


def llama_results(b, batch: int, seq: int, repeats: int, peak_gflops: float) -> tuple[dict, dict]:
    """PaddleFormers' eager training (issue 30 found Paddle's own to_static failing on this model's loss)
    against paddle_xla in fp32 and bf16; tokens/s, MFU and the speed-up, and the model's sizes."""
    import numpy as np

    net, _, _, _ = _llama(1, 8)
    # NOTE: the weights of matrix products; the embedding is a lookup and the norms' scales are per element
    params = sum(int(np.prod(v.shape)) for k, v in net.state_dict().items() if "embed_tokens" not in k and v.ndim == 2)
    jobs = {
        "paddle_eager": lambda: llama_paddle(b, batch, seq, repeats),
        "paddle_xla_fp32": lambda: llama_xla(b, batch, seq, repeats, "fp32"),
        "paddle_xla_bf16": lambda: llama_xla(b, batch, seq, repeats, "bf16"),
    }
    out = timed(b, "llama", jobs, batch, llama_flops(batch, seq, params), peak_gflops)
    for r in out.values():
        if "samples_per_s" in r:
            r["tokens_per_s"] = r["samples_per_s"] * seq
    return out, {"params": sum(int(np.prod(p.shape)) for p in net.parameters()), "matmul_params": params}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="base")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5, help="BERT: interleaved rounds; ResNet-50: timed calls")
    ap.add_argument("--max-predictions", type=int, default=20)
    ap.add_argument("--models", default="bert,resnet50", help=f"comma-separated: bert, llama, {', '.join(CNNS)}")
    ap.add_argument("--llama-batch", type=int, default=8)
    ap.add_argument("--llama-seq", type=int, default=512)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "train.json"))
    args = ap.parse_args()
    from paddle_xla.cli import bench as b

    s = b.BenchSettings(
        config=args.config,
        batch=args.batch,
        seq=args.seq,
        repeats=args.repeats,
        parts=("train",),
        max_predictions=args.max_predictions,
    )
    models = args.models.split(",")
    print("building BERT configurations, then timing them in interleaved rounds ...", flush=True)
    report = b.run_interleaved(s, builders(b, s) if "bert" in models else {}, args.repeats)
    if "llama" in models:
        report["results"]["train_llama"], sizes = llama_results(
            b, args.llama_batch, args.llama_seq, args.repeats, report["matmul_peak"]["fp32_gflops"]
        )
        report["llama"] = dict(LLAMA, batch=args.llama_batch, seq=args.llama_seq, **sizes)
    for cnn in (m for m in models if m in CNNS):
        report["results"][f"train_{cnn}"] = resnet_results(
            b, args.batch, args.repeats, report["matmul_peak"]["fp32_gflops"], cnn
        )
    report.update(
        benchmark="train",
        command="benchmarks/train.py " + " ".join(sys.argv[1:]),
        machine=machine_info(),
        batch=args.batch,
        seq=args.seq,
        model=f"BertForPretraining({args.config})",
    )
    b.write(report, args.out)
    print("| configuration | step | samples/s | MFU (fp32 peak) | vs Paddle's best |")
    print("|---|---|---|---|---|")
    for part, cfg, step, sps, mfu, vs in b.rows(report):
        model = (
            part[len("train_") :] if part.startswith("train_") and part[len("train_") :] in (*CNNS, "llama") else "BERT"
        )
        print(f"| {model} {cfg} | {step} | {sps} | {mfu} | {vs} |")
    for cfg, r in report["results"].get("train_llama", {}).items():
        if isinstance(r, dict) and "tokens_per_s" in r:
            print(
                f"llama {cfg}: {r['tokens_per_s']:.0f} tokens/s, MFU {r['mfu_fp32']:.1%}, "
                f"{r.get('speedup_vs_paddle_best', float('nan')):.2f}x Paddle"
            )


if __name__ == "__main__":
    from paddle_xla import x64

    with x64.scope():  # NOTE: Paddle's int64 feeds for the raw JAX calls timed here, as the library's own
        main()
