"""The planner's sizing table: BERT-Large, a GPT-2-1.5B shape, a Llama-7B shape and two mixtures of experts
(ERNIE-4.5-21B-A3B's and Qwen3-30B-A3B's shapes, PaddleFormers' own model classes) on an IPU-POD16 of GC200,
8 x H200 and a TPU v5e-16, each model built under paddle.LazyGuard() (no weights allocated).

For each pair: whether any layout fits, the best one, its predicted bytes per device and samples/s,
and Graphcore's published BERT-Large layout on the POD16 predicted beside it; for the mixtures, their
parameters, the parameters a token runs, and their experts' bytes per device in the best layout.

    python benchmarks/plan_sizing.py   ->  benchmarks/results/plan_sizing.json (and a markdown table)
    python benchmarks/plan_sizing.py --models ernie-4.5-21b-a3b,qwen3-30b-a3b   (merged into that file)
"""

from __future__ import annotations

import argparse
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


def _paddleformers(family: str):
    """PaddleFormers' modeling and configuration modules of an MoE family (`paddle-xla install paddleformers`)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from generation.paddleformers import moe, moe_config

    return moe(family), moe_config(family)


def ernie_45_21b_a3b():
    # NOTE: ERNIE-4.5-21B-A3B's published config.json; without its multi-token-prediction layer, whose training
    # asks for packed-batch offsets
    mod, _ = _paddleformers("ernie4_5_moe")
    cfg = mod.Ernie4_5_MoeConfig(
        hidden_size=2560, intermediate_size=12288, num_hidden_layers=28, num_attention_heads=20,
        num_key_value_heads=4, head_dim=128, vocab_size=103424, max_position_embeddings=131072, rope_theta=500000,
        moe_num_experts=64, moe_k=6, moe_intermediate_size=1536, moe_num_shared_experts=2, moe_layer_start_index=1,
        moe_layer_end_index=27, num_nextn_predict_layers=0,
    )  # fmt: skip
    return _causal_lm(mod.Ernie4_5_MoeForCausalLM(cfg), "ERNIE-4.5-21B-A3B shape (28 x 2560, 64 experts, top-6)")


def qwen3_30b_a3b():
    # NOTE: Qwen3-30B-A3B's published config.json
    mod, conf = _paddleformers("qwen3_moe")
    cfg = conf.Qwen3MoeConfig(
        hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_hidden_layers=48,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
        vocab_size=151936, max_position_embeddings=40960, norm_topk_prob=True, tie_word_embeddings=False,
        fuse_rms_norm=False,
    )  # fmt: skip
    return _causal_lm(mod.Qwen3MoeForCausalLMDeprecated(cfg), "Qwen3-30B-A3B shape (48 x 2048, 128 experts, top-8)")


def _causal_lm(net, what: str) -> dict:
    return dict(
        net=net,
        input_spec=[InputSpec([None, 2048], "int64", "input_ids")],
        label_spec=[InputSpec([None, 2048], "int64", "labels")],
        global_batch=256,
        what=f"{what}, its own loss, seq 2048",
    )


MODELS = {
    "bert-large": bert_large,
    "gpt2-1.5b": gpt2_xl,
    "llama-7b": llama_7b,
    "ernie-4.5-21b-a3b": ernie_45_21b_a3b,
    "qwen3-30b-a3b": qwen3_30b_a3b,
}


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
    if result.expert_params:
        out.update(params=result.params, active_params=result.active_params, expert_params=result.expert_params)
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
        if result.expert_params:
            out["expert_gb_per_device"] = round(row.expert_bytes / 1e9, 3)
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
            experts = f" (experts {r['expert_gb_per_device']})" if "expert_gb_per_device" in r else ""
            cells.append(
                f"{r['best']}: {r['gb_per_device']} GB/device{experts}, {r['samples_per_s']} samples/s"
                if r.get("best")
                else "does not fit: " + r["why"].split(":")[1].split("(")[0].strip()
            )
        first = next(iter(per.values()))
        if "params" in first:
            name += f" ({first['params'] / 1e9:.1f} B, {first['active_params'] / 1e9:.1f} B active)"
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="a comma-separated subset of " + ", ".join(MODELS))
    names = ap.parse_args().models.split(",")
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        ap.error(f"unknown models {unknown}; the script sizes {sorted(MODELS)}")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "plan_sizing.json")
    results = {}
    if os.path.exists(out):  # NOTE: a subset run keeps the other models' rows of the last run
        with open(out) as f:
            results = json.load(f)["results"]
    for name in names:
        build = MODELS[name]
        results[name] = {}
        for device, devices, _ in MACHINES:
            results[name][f"{device}x{devices}"] = r = plan_one(build, device, devices)
            print(f"{name} on {devices} x {device}: {r.get('best') or 'no fit'} ({r['plan_seconds']} s)", flush=True)
    results = {name: results[name] for name in MODELS if name in results}
    with open(out, "w") as f:
        json.dump({"command": "python benchmarks/plan_sizing.py", "results": results}, f, indent=1)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
