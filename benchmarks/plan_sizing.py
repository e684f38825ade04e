"""The planner's sizing table: BERT-Large, a GPT-2-1.5B shape and a Llama-7B shape on an IPU-POD16 of
GC200, 8 x H200 and a TPU v5e-16, each model built under paddle.LazyGuard() (no weights allocated).

For each pair: whether any layout fits, the best one, its predicted bytes per device and samples/s,
and Graphcore's published BERT-Large layout on the POD16 predicted beside it.

    python benchmarks/plan_sizing.py   ->  benchmarks/results/plan_sizing.json (and a markdown table)
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import paddle
import paddle.nn.functional as F
from paddle.static import InputSpec

import paddle_xla as px
from paddle_xla.errors import StrategyError
from paddle_xla.models.bert import BertConfig, BertForPretraining
from paddle_xla.models.gpt import GPT, GPTConfig
from paddle_xla.models.llama import LlamaConfig, LlamaForCausalLM
from paddle_xla.planner.search import describe, planned

MACHINES = [("ipu-gc200", 16, "IPU-POD16 (GC200)"), ("h200", 8, "8 x H200"), ("tpu-v5e", 16, "TPU v5e-16")]


def bert_large():
    net = BertForPretraining(BertConfig.named("large"))
    return dict(
        net=net,
        input_spec=BertForPretraining.input_spec(128, 20),
        global_batch=512,
        what="BERT-Large pretraining, seq 128, 20 masked positions",
    )


def gpt2_xl():
    net = GPT(GPTConfig.named("gpt2-xl"))
    vocab = net.config.vocab_size
    return dict(
        net=net,
        input_spec=[InputSpec([None, 1024], "int64", "ids")],
        label_spec=[InputSpec([None, 1024], "int64", "labels")],
        global_batch=512,
        loss_fn=lambda logits, labels: F.cross_entropy(logits.reshape([-1, vocab]), labels.reshape([-1, 1])).mean(),
        what="GPT-2 1.5B (48 x 1600, 25 heads), seq 1024",
    )


def llama_7b():
    net = LlamaForCausalLM(LlamaConfig.named("llama-7b"))
    return dict(
        net=net,
        input_spec=LlamaForCausalLM.input_spec(2048),
        global_batch=256,
        what="Llama-7B shape (32 x 4096, 32 heads, SwiGLU 11008), seq 2048",
    )


MODELS = {"bert-large": bert_large, "gpt2-1.5b": gpt2_xl, "llama-7b": llama_7b}


def plan_one(build, device: str, devices: int) -> dict:
    with paddle.LazyGuard():
        m = build()
        opt = paddle.optimizer.AdamW(1e-4, parameters=m["net"].parameters())
    start = time.perf_counter()
    result = px.plan(
        m["net"],
        m["input_spec"],
        m.get("label_spec", ()),
        opt,
        loss_fn=m.get("loss_fn"),
        global_batch=m["global_batch"],
        devices=devices,
        device=device,
    )
    out = {
        "what": m["what"],
        "global_batch": m["global_batch"],
        "plan_seconds": round(time.perf_counter() - start, 1),
        "layouts_considered": len(result.rows),
        "fitting": sum(r.fits for r in result.rows),
        "table": result.table(8),
    }
    try:
        best = result.best
        row = next(r for r in result.rows if r.fits)
        out.update(
            best=describe(row.layout),
            strategy=best.to_dict(),
            gb_per_device=round(row.total_bytes / 1e9, 3),
            samples_per_s=round(row.samples_per_second, 1),
            bytes=row.bytes,
        )
    except StrategyError as e:
        out.update(best=None, why=str(e))
    if device == "ipu-gc200" and "BERT" in m["what"]:
        out["graphcore_layout"] = graphcore_bert_large(result)
    return out


def graphcore_bert_large(result) -> dict:
    """Graphcore's published BERT-Large layout on a POD16: 4 replicas x 4 pipelined IPUs (layers 3/7/7/7),
    fp16, replicated tensor sharding, optimizer state off-chip, predicted by the same model."""
    layout = planned(replicas=4, stages=4, sharding=1, micro_batches=16, schedule="1f1b", precision="fp16")
    row = next((r for r in result.rows if r.layout == layout), None)
    if row is None:
        return {"layout": describe(layout), "note": "not among the planned layouts"}
    on_chip = row.total_bytes - row.bytes["optimizer"]
    return {
        "layout": describe(layout),
        "gb_per_device": round(row.total_bytes / 1e9, 3),
        "gb_without_optimizer_state": round(on_chip / 1e9, 3),
        "fits_with_state_off_chip": on_chip <= 0.9e9,
        "samples_per_s": round(row.samples_per_second, 1),
    }


def markdown(results: dict) -> str:
    lines = ["| model | " + " | ".join(label for _, _, label in MACHINES) + " |", "|---|" + "---|" * len(MACHINES)]
    for name, per in results.items():
        cells = []
        for device, devices, _ in MACHINES:
            r = per[f"{device}x{devices}"]
            cells.append(
                f"{r['best']}: {r['gb_per_device']} GB/device, {r['samples_per_s']} samples/s"
                if r.get("best")
                else "does not fit: " + r["why"].split(":")[1].split("(")[0].strip()
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    results = {}
    for name, build in MODELS.items():
        results[name] = {}
        for device, devices, _ in MACHINES:
            results[name][f"{device}x{devices}"] = r = plan_one(build, device, devices)
            print(f"{name} on {devices} x {device}: {r.get('best') or 'no fit'} ({r['plan_seconds']} s)", flush=True)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "plan_sizing.json")
    with open(out, "w") as f:
        json.dump({"command": "python benchmarks/plan_sizing.py", "results": results}, f, indent=1)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
