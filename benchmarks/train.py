"""Training step time: BERT-Base pretraining (seq 128, batch 8), paddle_xla (fp32 and bf16) against
native Paddle (eager, to_static, and eager under Paddle's own bf16 AMP; the fastest is the baseline)
in the same run, with MFU against the matmul peak measured in the same run.

    .venv/bin/python benchmarks/train.py [--config base|small|tiny] [--batch 8] [--repeats 3]

Model FLOPs per step = 3 x forward, the forward being the encoder plus the MLM head over every token:
6 x matmul params x tokens + attention (paddle_xla.perf.bert_pretraining_flops). The measurements are
paddle_xla.bench's (the `paddle-xla bench` command), run here with a fixed set of configurations."""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import machine_info  # noqa: E402


def configurations(b, s):
    """(part, configuration, measure) for bench.run: Paddle's three and paddle_xla's two."""
    xla = lambda precision: lambda: b.xla_train(dataclasses.replace(s, strategy={"precision": precision}))  # noqa: E731
    return [("train", "paddle_eager", lambda: b.paddle_train(s, static=False)),
            ("train", "paddle_to_static", lambda: b.paddle_train(s, static=True)),
            ("train", "paddle_eager_amp_bf16", lambda: b.paddle_train(s, static=False, amp="bfloat16")),
            ("train", "paddle_xla_fp32", xla("fp32")),
            ("train", "paddle_xla_bf16", xla("bf16"))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="base")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "train.json"))
    args = ap.parse_args()
    from paddle_xla import bench as b
    s = b.BenchSettings(config=args.config, batch=args.batch, seq=args.seq, repeats=args.repeats, parts=("train",))
    report = b.run(s, lambda part, cfg: print(f"timing {cfg} ...", flush=True), configurations(b, s))
    report.update(benchmark="train", command="benchmarks/train.py " + " ".join(sys.argv[1:]),
                  machine=machine_info(), batch=args.batch, seq=args.seq,
                  model=f"BertForPretraining({args.config})")
    b.write(report, args.out)
    print("| configuration | step | samples/s | MFU (fp32 peak) | vs Paddle's best |")
    print("|---|---|---|---|---|")
    for _, cfg, step, sps, mfu, vs in b.rows(report):
        print(f"| {cfg} | {step} | {sps} | {mfu} | {vs} |")


if __name__ == "__main__":
    main()
