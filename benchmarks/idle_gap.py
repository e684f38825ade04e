"""How an idle gap before a call changes its latency, for paddle_xla and Paddle Inference (oneDNN).

    .venv/bin/python benchmarks/idle_gap.py                       # PP-LCNet and MobileNetV3-small, batch 8
    .venv/bin/python benchmarks/idle_gap.py --models pp_lcnet --batch 1

benchmarks/inference.py lets each configuration rest `--gap` seconds between turns, so that one's
spinning threads do not slow the next. On this 2-core VM a call of 10-40 ms that follows 0.3 s of idle
ran up to 2x slower than the same call back to back, even after warm calls in between. This script
measures that directly: for each gap (0, 0.01, 0.3 s) it sleeps, makes one untimed call, then times
one call, `--repeats` times, for each framework in a process of its own (one at a time, so neither
disturbs the other). The JSON lands in benchmarks/results/idle_gap.json."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

GAPS = (0.0, 0.01, 0.3)


def worker(model: str, batch: int, framework: str, repeats: int) -> dict:
    import tempfile

    import numpy as np
    from inference import setup_inference, setup_xla

    settings = {"batch": batch, "size": 224}
    job = {
        "config": "paddle_xla" if framework == "paddle_xla" else "inference_onednn",
        "workdir": tempfile.mkdtemp(prefix="paddle_xla_idle_gap_"),
        "tag": f"{model}_{framework}",
        "nproc": common.nproc(),
    }
    setup = setup_xla if framework == "paddle_xla" else setup_inference
    _, call, _ = setup(model, settings, job)
    for _ in range(3):
        call()
    out = {}
    for gap in GAPS:
        samples = []
        for _ in range(repeats):
            time.sleep(gap)
            call()
            start = time.perf_counter()
            call()
            samples.append((time.perf_counter() - start) * 1e3)
        out[str(gap)] = {
            "median_ms": float(np.median(samples)),
            "min_ms": min(samples),
            "samples_ms": [round(s, 2) for s in samples],
        }
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="pp_lcnet,mobilenet_v3_small")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--out", default=os.path.join(HERE, "results", "idle_gap.json"))
    p.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        model, framework, batch = args.worker
        print(json.dumps(worker(model, int(batch), framework, args.repeats)))
        return 0
    results = {}
    for model in args.models.split(","):
        for framework in ("paddle_xla", "inference_onednn"):
            env = {**os.environ, "OMP_NUM_THREADS": str(common.nproc()), "PADDLE_XLA_CACHE": "0"}
            if framework != "paddle_xla":
                # NOTE: under paddle_xla's malloc policy, so that the two differ in the gap's effect only
                env.update(common.paddle_env(kept_heap=True))
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--repeats",
                    str(args.repeats),
                    "--worker",
                    model,
                    framework,
                    str(args.batch),
                ],
                capture_output=True,
                text=True,
                env=env,
                timeout=1200,
            )
            if done.returncode:
                raise SystemExit(done.stderr[-3000:])
            results.setdefault(model, {})[framework] = json.loads(done.stdout.strip().splitlines()[-1])
            row = results[model][framework]
            print(
                f"{model:20s} {framework:18s} "
                + "  ".join(f"gap {g}s: {row[str(g)]['median_ms']:.1f} ms" for g in GAPS),
                flush=True,
            )
    report = {
        "benchmark": "idle_gap",
        "command": "benchmarks/idle_gap.py " + " ".join(argv or sys.argv[1:]),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": common.machine_info(),
        "batch": args.batch,
        "repeats": args.repeats,
        "gaps_s": list(GAPS),
        "models": results,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
