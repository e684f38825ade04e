"""Write the BERT artifacts benchmarks/gpu.py runs on a GPU host that has no Paddle.

    .venv/bin/python benchmarks/make_gpu_artifacts.py            # BERT-Base, seq 128, for cpu and cuda
    .venv/bin/python benchmarks/make_gpu_artifacts.py --quick    # BERT-tiny, seq 32, cpu only (CI)
    .venv/bin/python benchmarks/make_gpu_artifacts.py --only llm # one of them again, the others kept

Writes to benchmarks/artifacts/ (or --out):
  bert-<name>-infer.pxa       BertModel in eval mode, batch --infer-batch
  bert-<name>-train.pxa       BERT pretraining (MLM + NSP) train step: AdamW, LinearWarmup, global-norm clip
  bert-<name>-train-bf16.pxa  the same step under Strategy(precision="bf16"), when train_step takes it
  bert-<name>.json            the model config, batch sizes, FLOPs and artifact sizes gpu.py reads
  llama-serve.pxa             serve_llm.py's Llama (about 100M parameters) as the server runs it: a generator
                              of 32 rows over 768 cache slots, prefill chunks of 64 (--quick: its tiny Llama,
                              llama-tiny-serve.pxa), for gpu.py's llm-rounds section

The artifacts keep only the weights of one dimension (biases, LayerNorm); the matrices are drawn on
the GPU host as normal(0, 0.02), Paddle's BERT init (export(..., synthetic_weights=...)). So a BERT-Base
artifact is its Graph and executables, a few MB, not 440 MB of float32: small enough to carry.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import common  # noqa: E402
import paddle  # noqa: E402
from gpu_llm import artifact_name  # noqa: E402

import paddle_xla as px  # noqa: E402

# NOTE: not px.export: once the submodule paddle_xla.export is imported, it shadows that lazy name.
from paddle_xla.artifact.writer import export  # noqa: E402
from paddle_xla.models.bert import BertConfig, BertForPretraining, BertModel  # noqa: E402
from paddle_xla.models.bert_data import synthetic_batch  # noqa: E402

SYNTHETIC = {"std": 0.02, "seed": 0}
LLM_ROWS = 32  # NOTE: serve_llm.py's --rows (the generator's max_batch_size)


# NOTE: phase 1 of BERT pretraining (Google's, NVIDIA's, Graphcore's): the MLM head on 20 masked
# positions per sequence at seq 128, as `paddle-xla bench` times it on CPU.
MAX_PREDICTIONS = 20


def make_train_step(cfg: BertConfig, seq: int, strategy=None):
    paddle.seed(0)
    net = BertForPretraining(cfg)
    net.train()
    sched = paddle.optimizer.lr.LinearWarmup(
        paddle.optimizer.lr.PolynomialDecay(1e-4, 10000, end_lr=0.0), 1000, 0.0, 1e-4
    )
    opt = paddle.optimizer.AdamW(
        sched, parameters=net.parameters(), weight_decay=0.01, grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0)
    )
    specs = BertForPretraining.input_spec(seq, MAX_PREDICTIONS)
    kw = {} if strategy is None else {"strategy": strategy}
    # NOTE: the net computes its own loss (loss_fn None), so the labels are inputs of the net.
    return px.train_step(net, None, opt, specs, **kw)


def export_inference(cfg, seq, batch, path, platforms) -> dict:
    paddle.seed(0)
    net = BertModel(cfg)
    net.eval()
    model = px.compile(net, BertModel.input_spec(seq))
    b = synthetic_batch(cfg, batch, seq)
    return export(
        model, path, platforms=platforms, example_inputs=[b.input_ids, b.token_type_ids], synthetic_weights=SYNTHETIC
    )


def export_train(cfg, seq, batch, path, platforms, strategy=None) -> dict:
    step = make_train_step(cfg, seq, strategy)
    b = synthetic_batch(cfg, batch, seq)
    return export(
        step,
        path,
        platforms=platforms,
        example_inputs=b.with_masked_positions(MAX_PREDICTIONS),
        synthetic_weights=SYNTHETIC,
    )


def export_llm(quick: bool, path: str, platforms) -> dict:
    """serve_llm.py's generator (the same model, rows, cache slots and prefill chunk) with synthetic weights."""
    from generate import SHAPE
    from paddleformers.transformers.llama import LlamaConfig, LlamaForCausalLM
    from serve_llm import TINY

    from paddle_xla.api.generator import Generator

    paddle.seed(0)
    net = LlamaForCausalLM(LlamaConfig(**{**(TINY if quick else SHAPE), "max_position_embeddings": 1024}))
    net.eval()
    rows, context, chunk = (4, 96, 16) if quick else (LLM_ROWS, 768, 64)
    gen = Generator(net, max_batch_size=rows, max_length=context, chunk=1, prefill_chunk=chunk)
    return export(gen, path, platforms=platforms, synthetic_weights=SYNTHETIC)


def bf16_available() -> str | None:
    """None when px.train_step takes Strategy(precision="bf16"), else why not."""
    try:
        make_train_step(BertConfig.tiny(num_hidden_layers=1), 16, px.Strategy(precision="bf16"))
        return None
    except Exception as e:  # noqa: BLE001  (any failure means: no bf16 artifact, say why)
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def flops(cfg: BertConfig, seq: int, infer_batch: int, train_batch: int) -> dict:
    """Analytic FLOPs (2 per multiply-add): the encoder, and for training the MLM/NSP heads, x3 for
    forward + backward. gpu.py also counts them from the program itself."""
    enc = dict(layers=cfg.num_hidden_layers, hidden=cfg.hidden_size, intermediate=cfg.intermediate_size, seq=seq)
    head = 2 * train_batch * MAX_PREDICTIONS * (cfg.hidden_size**2 + cfg.hidden_size * cfg.vocab_size)
    return {
        "infer_forward": common.bert_flops(batch=infer_batch, **enc),
        "train_step": 3 * (common.bert_flops(batch=train_batch, **enc) + head),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="BERT-tiny, seq 32, small batches, cpu only")
    ap.add_argument("--out", default=os.path.join(HERE, "artifacts"))
    ap.add_argument("--seq", type=int)
    ap.add_argument("--infer-batch", type=int)
    ap.add_argument("--train-batch", type=int)
    ap.add_argument("--platforms", default=None, help="comma-separated, default cpu,cuda (--quick: cpu)")
    ap.add_argument(
        "--only",
        default=None,
        help="comma-separated subset of infer,train,train-bf16,llm; the JSON keeps the other artifacts' entries",
    )
    args = ap.parse_args(argv)
    # NOTE: --quick is a CI smoke run: one layer keeps the train step's compile short on CPU.
    cfg = (
        BertConfig.tiny(num_hidden_layers=1, vocab_size=512, max_position_embeddings=64)
        if args.quick
        else BertConfig.base()
    )
    seq = args.seq or (32 if args.quick else 128)
    infer_batch = args.infer_batch or (8 if args.quick else 64)
    train_batch = args.train_batch or (4 if args.quick else 32)
    platforms = (args.platforms or ("cpu" if args.quick else "cpu,cuda")).split(",")
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"bert-{cfg.name}")
    meta = {
        "model": f"bert-{cfg.name}",
        "config": dataclasses.asdict(cfg),
        "seq": seq,
        "infer_batch": infer_batch,
        "train_batch": train_batch,
        "platforms": platforms,
        "synthetic_weights": SYNTHETIC,
        "flops": flops(cfg, seq, infer_batch, train_batch),
        "versions": common.versions(),
        "artifacts": {},
    }
    jobs = [
        ("infer", lambda p: export_inference(cfg, seq, infer_batch, p, platforms)),
        ("train", lambda p: export_train(cfg, seq, train_batch, p, platforms)),
    ]
    why_no_bf16 = bf16_available()
    meta["bf16_train"] = why_no_bf16 or "exported"
    if why_no_bf16 is None:
        jobs.append(
            ("train-bf16", lambda p: export_train(cfg, seq, train_batch, p, platforms, px.Strategy(precision="bf16")))
        )
    else:
        print(f"no bf16 train artifact: Strategy(precision='bf16') does not work here ({why_no_bf16})", flush=True)
    llm = os.path.join(args.out, artifact_name(args.quick))
    jobs.append(("llm", lambda p: export_llm(args.quick, p, platforms)))
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {tag for tag, _ in jobs})
        if unknown:
            ap.error(f"--only {','.join(unknown)}: not among {[tag for tag, _ in jobs]}")
        jobs = [(tag, job) for tag, job in jobs if tag in wanted]
        if os.path.exists(f"{stem}.json"):
            # NOTE: the artifacts not made again are an earlier run's: its record (FLOPs, versions, ...) stands,
            # and only the entries of those made now change
            with open(f"{stem}.json", encoding="utf-8") as f:
                meta = json.load(f)
    for tag, job in jobs:
        path = llm if tag == "llm" else f"{stem}-{tag}.pxa"
        start = time.perf_counter()
        manifest = job(path)
        took = time.perf_counter() - start
        meta["artifacts"][tag] = {
            "file": os.path.basename(path),
            "bytes": os.path.getsize(path),
            "export_seconds": round(took, 1),
            "exported": manifest.get("exported"),
            "members": {k: v["size"] for k, v in manifest["members"].items()},
        }
        print(f"wrote {path}: {os.path.getsize(path) / 2**20:.1f} MiB in {took:.0f} s", flush=True)
    with open(f"{stem}.json", "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
    print(f"wrote {stem}.json", flush=True)
    return 0


if __name__ == "__main__":
    from paddle_xla import x64

    with x64.scope():  # NOTE: Paddle's int64 feeds for the raw JAX calls timed here, as the library's own
        sys.exit(main())
