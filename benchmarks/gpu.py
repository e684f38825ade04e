"""BERT inference and training on an accelerator from exported artifacts alone (no Paddle there):
samples/s and MFU against the card's datasheet peak and a matmul peak measured in the same run.

On the GPU host (jax with CUDA, numpy, safetensors, optax, rich, flatbuffers for jax.export's executables;
this repository; no paddle; --quick ran on CPU with Python 3.12 and jax 0.11.2, the device image's):
    PYTHONUNBUFFERED=1 python benchmarks/gpu.py
Anywhere, as a smoke run on CPU with BERT-tiny (artifacts from make_gpu_artifacts.py --quick):
    python benchmarks/gpu.py --quick --artifacts /tmp/qa

The artifacts come from benchmarks/make_gpu_artifacts.py (run where Paddle is). Their matrices are
drawn here as normal(0, 0.02) (synthetic weights), so the losses are a fresh model's, not a trained one.
Each section runs on its own (an error is recorded, the next one runs), and the JSON is written after
every section to $OUT/gpu.json when $OUT is set, else to benchmarks/results/gpu.json (or --out).
Sections: peak (matmuls), train-bf16, infer-bf16, llm-rounds (gpu_llm.py: a served Llama's decode step
against a round with a prefill chunk, issue 29), infer-fp32, train-fp32; a section starts only while the
elapsed time is under --budget seconds.
"""

from __future__ import annotations

import sys

sys.modules["paddle"] = None  # NOTE: what runs here must run where Paddle is not: any import of it fails

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from typing import Any  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from gpu_llm import artifact_name, llm_rounds  # noqa: E402

# NOTE: dense (no 2:4 sparsity) tensor-core peaks per card, TFLOP/s, from NVIDIA's datasheets. "tf32" is
# what a float32 matmul gets when XLA lets it use TF32 (its default on GPUs that have it).
DATASHEET_TFLOPS = {
    "H200": {"bf16": 989.0, "tf32": 494.0, "fp32": 67.0},
    "H100 PCIe": {"bf16": 756.0, "tf32": 378.0, "fp32": 51.0},
    "H100": {"bf16": 989.0, "tf32": 494.0, "fp32": 67.0},
    "A100": {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5},
}
# NOTE: Graphcore's published BERT-Base phase-1 pretraining (seq 128) on an IPU-POD16.
GRAPHCORE_POD16 = {
    "samples_per_s": 11700,
    "chips": 16,
    "per_chip": 11700 / 16,
    "what": "BERT-Base phase 1 pretraining, seq 128, IPU-POD16 (Graphcore MLPerf-style result)",
}
IGNORE = -100


def log(msg: str) -> None:
    print(f"[gpu.py {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- the machine ---------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    d = jax.devices()[0]
    info = {
        "backend": jax.default_backend(),
        "device_kind": d.device_kind,
        "device_count": jax.device_count(),
        "jax": jax.__version__,
        "python": sys.version.split()[0],
        "platform": d.platform,
    }
    try:
        stats = d.memory_stats() or {}
        info["memory_gib"] = round(stats.get("bytes_limit", 0) / 2**30, 1) or None
    except Exception:  # noqa: BLE001  (CPU devices have no memory stats)
        info["memory_gib"] = None
    return info


def datasheet(device_kind: str) -> dict[str, float] | None:
    for name, peaks in DATASHEET_TFLOPS.items():  # NOTE: "H100 PCIe" is listed before "H100"
        if name.lower() in device_kind.lower():
            return peaks
    return None


# ---- timing ------------------------------------------------------------------------------------
def throughput(
    call: Callable[[], Any], sync: Callable[[Any], Any], min_seconds: float, max_iters: int, warmup: int = 2
) -> dict[str, Any]:
    """Seconds per call over a run of calls dispatched back to back, synced at the end; the first
    call's time (compile included) is reported apart."""
    start = time.perf_counter()
    sync(call())
    first = time.perf_counter() - start
    for _ in range(warmup - 1):
        sync(call())
    iters, out, start = 0, None, time.perf_counter()
    while iters < max_iters and (iters < 3 or time.perf_counter() - start < min_seconds):
        out = call()
        iters += 1
    sync(out)
    took = time.perf_counter() - start
    return {"seconds_per_call": took / iters, "iters": iters, "first_call_seconds": round(first, 2)}


def block(x):
    return jax.block_until_ready(x)


# ---- the matmul peak ---------------------------------------------------------------------------
def matmul_tflops(n: int, dtype, precision: str | None, min_seconds: float) -> float:
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32).astype(dtype)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32).astype(dtype)
    f = jax.jit(lambda a, b: jnp.matmul(a, b, precision=precision))
    t = throughput(lambda: f(a, b), block, min_seconds, 200)
    return 2 * n**3 / t["seconds_per_call"] / 1e12


def peak(quick: bool) -> dict[str, Any]:
    sizes = (256, 512) if quick else (4096, 8192)
    secs = 0.2 if quick else 1.0
    out = {}
    for name, dtype, prec in (
        ("bf16", jnp.bfloat16, None),
        ("fp32_default", jnp.float32, None),
        ("fp32_highest", jnp.float32, "highest"),
    ):
        by = {n: round(matmul_tflops(n, dtype, prec, secs), 2) for n in sizes}
        out[name] = {"tflops": max(by.values()), "by_size": by}
        log(f"matmul {name}: {out[name]['tflops']} TFLOP/s (sizes {list(sizes)})")
    out["how"] = "jax.jit(jnp.matmul) n x n x n, calls back to back, 2 n^3 FLOPs; fp32_default lets XLA use TF32"
    return out


# ---- feeds and FLOPs ---------------------------------------------------------------------------
def bert_feeds(
    names, batch: int, seq: int, vocab: int, seed: int = 0, max_predictions: int = 20
) -> dict[str, jax.Array]:
    """Synthetic inputs; with a masked_positions input, the MLM labels are those positions' ids."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, (batch, seq)).astype("int64")
    types = np.zeros_like(ids)
    types[:, seq // 2 :] = 1
    all_feeds = {
        "input_ids": ids,
        "token_type_ids": types,
        "mlm_labels": np.where(rng.random((batch, seq)) < 0.15, ids, IGNORE).astype("int64"),
        "nsp_labels": rng.integers(0, 2, (batch,)).astype("int64"),
    }
    if "masked_positions" in names:
        positions = np.sort(np.stack([rng.choice(seq, max_predictions, replace=False) for _ in range(batch)]), 1)
        all_feeds["masked_positions"] = positions.astype("int64")
        all_feeds["mlm_labels"] = np.take_along_axis(ids, positions, 1)
    # NOTE: on the device once, so the timed loop measures the model, not host-to-device copies.
    return {n: jax.device_put(all_feeds[n]) for n in names}


def counted_flops(ctx: dict, kind: str, fn, *args) -> float | None:
    """Matmul FLOPs of fn(*args) from its jaxpr (benchmarks/common.jaxpr_flops), or None; once per kind."""
    # NOTE: fp32 and bf16 run the same matmuls, and tracing BERT-Base takes seconds of the budget.
    if kind in ctx["flops"]:
        return ctx["flops"][kind]
    ctx["flops"][kind] = _count_flops(fn, *args)
    return ctx["flops"][kind]


def _count_flops(fn, *args) -> float | None:
    try:
        import common

        return float(sum(common.jaxpr_flops(jax.make_jaxpr(fn)(*args)).values()))
    except Exception as e:  # noqa: BLE001
        log(f"could not count FLOPs from the program ({type(e).__name__}: {e}); using the analytic count")
        return None


def avals(tree):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), tree)


def mfu(flops: float | None, seconds: float, precision: str, sheet, measured: dict | None) -> dict[str, Any]:
    if not flops:
        return {}
    rate = flops / seconds / 1e12
    out = {"achieved_tflops": round(rate, 2)}
    if sheet:
        keys = ("bf16",) if precision == "bf16" else ("tf32", "fp32")
        out.update({f"mfu_vs_datasheet_{k}": round(rate / sheet[k], 4) for k in keys})
    if measured:
        key = "bf16" if precision == "bf16" else "fp32_default"
        if key in measured:
            out[f"mfu_vs_measured_{key}"] = round(rate / measured[key]["tflops"], 4)
    return out


# ---- the sections ------------------------------------------------------------------------------
def infer(ctx: dict, precision: str) -> dict[str, Any]:
    from paddle_xla.artifact import reader as pxa
    from paddle_xla.lowering.lower import lower

    path = ctx["paths"]["infer"]
    meta = ctx["meta"]
    start = time.perf_counter()
    art = pxa.load(path)
    load_s = time.perf_counter() - start
    batch, seq = meta["infer_batch"], meta["seq"]
    feeds = bert_feeds(art.input_names, batch, seq, meta["config"]["vocab_size"])
    if precision == "fp32":
        call, mode, why = (lambda: art.run(**feeds)), None, None
    else:
        # NOTE: the artifact's executable is float32; bf16 re-lowers its Graph with Paddle's AMP O1 cast
        # policy (half.py), on the weights it loaded.
        from paddle_xla.lowering.policy import LoweringPolicy

        fn = jax.jit(lower(art.graph, LoweringPolicy.live(precision)))
        params, buffers = jax.device_put(_split(art))
        key = jax.random.wrap_key_data(art.key_data)
        call, mode, why = (lambda: fn(params, buffers, feeds, key)[0]), "relowered", f"Graph lowered in {precision}"
    t = throughput(call, block, ctx["min_seconds"], 500)
    mode, why = mode or art.mode, why or art.why
    params, buffers = _split(art)
    flops = (
        counted_flops(ctx, "infer", lower(art.graph), avals(params), avals(buffers), avals(feeds), jax.random.key(0))
        or meta["flops"]["infer_forward"]
    )
    res = {
        "precision": precision,
        "mode": mode,
        "why": why,
        "batch": batch,
        "seq": seq,
        "load_seconds": round(load_s, 2),
        "samples_per_s": round(batch / t["seconds_per_call"], 1),
        "ms_per_batch": round(t["seconds_per_call"] * 1e3, 3),
        "flops_per_batch": flops,
        **t,
        **mfu(flops, t["seconds_per_call"], precision, ctx["sheet"], ctx["results"].get("peak")),
    }
    log(f"infer {precision}: {res['samples_per_s']} samples/s, {res['ms_per_batch']} ms/batch ({mode})")
    return res


def _split(art) -> tuple[dict, dict]:
    trainable = {p.name for p in art.graph.params if p.trainable}
    return (
        {k: v for k, v in art.weights.items() if k in trainable},
        {k: v for k, v in art.weights.items() if k not in trainable},
    )


def train(ctx: dict, precision: str) -> dict[str, Any]:
    from paddle_xla.artifact import reader as pxa
    from paddle_xla.strategy import Strategy

    meta, paths = ctx["meta"], ctx["paths"]
    own = precision == "bf16" and os.path.exists(paths["train-bf16"])
    path = paths["train-bf16"] if own else paths["train"]
    # NOTE: without a bf16 artifact, the float32 one runs with its Strategy's precision overridden.
    override = None if own or precision == "fp32" else Strategy(precision=precision)
    start = time.perf_counter()
    s = pxa.load(path, strategy=override)
    load_s = time.perf_counter() - start
    batch, seq = meta["train_batch"], meta["seq"]
    feeds = bert_feeds(s.input_names, batch, seq, meta["config"]["vocab_size"])
    losses: list[float] = []
    # NOTE: each step returns the loss as a Python float, so each call syncs; that is how a training
    # loop runs too (one host round trip per step).
    t = throughput(lambda: losses.append(s(**feeds)), lambda _: None, ctx["min_seconds"], 200)
    from paddle_xla.artifact.train_writer import step_fn

    st = s.state
    flops = (
        counted_flops(
            ctx,
            "train",
            step_fn(s.graph, s.config),
            avals(dict(st.params)),
            avals(dict(st.buffers)),
            avals(st.opt_state),
            avals(feeds),
            np.zeros(2, np.uint32),
            np.float32(0),
        )
        or meta["flops"]["train_step"]
    )
    res = {
        "precision": precision,
        "artifact": os.path.basename(path),
        "mode": s.mode,
        "why": s.why,
        "batch": batch,
        "seq": seq,
        "load_seconds": round(load_s, 2),
        "samples_per_s": round(batch / t["seconds_per_call"], 1),
        "ms_per_step": round(t["seconds_per_call"] * 1e3, 3),
        "flops_per_step": flops,
        "losses_first_last": [losses[0], losses[-1]],
        "steps": len(losses),
        **t,
        "vs_graphcore_pod16": round(batch / t["seconds_per_call"] / GRAPHCORE_POD16["samples_per_s"], 4),
        **mfu(flops, t["seconds_per_call"], precision, ctx["sheet"], ctx["results"].get("peak")),
    }
    if not all(np.isfinite(losses)):
        res["warning"] = "non-finite loss"
    log(
        f"train {precision}: {res['samples_per_s']} samples/s, {res['ms_per_step']} ms/step ({s.mode}); "
        f"loss {losses[0]:.3f} -> {losses[-1]:.3f}"
    )
    return res


# NOTE: in the order of what a short device visit needs most: the bf16 BERT figures, then the served
# Llama's round against its step (issue 29), then fp32
SECTIONS = {
    "peak": lambda ctx: peak(ctx["quick"]),
    "train-bf16": lambda ctx: train(ctx, "bf16"),
    "infer-bf16": lambda ctx: infer(ctx, "bf16"),
    "llm-rounds": lambda ctx: llm_rounds(ctx["paths"]["llm"], log),
    "infer-fp32": lambda ctx: infer(ctx, "fp32"),
    "train-fp32": lambda ctx: train(ctx, "fp32"),
}


# ---- main --------------------------------------------------------------------------------------
def out_path(arg: str | None) -> str:
    if arg:
        return arg
    if os.environ.get("OUT"):
        return os.path.join(os.environ["OUT"], "gpu.json")
    return os.path.join(HERE, "results", "gpu.json")


def write(path: str, results: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, default=str)
    os.replace(tmp, path)


def context(args) -> dict:
    name = "bert-tiny" if args.quick else args.model
    stem = os.path.join(args.artifacts, name)
    with open(f"{stem}.json", encoding="utf-8") as f:
        meta = json.load(f)
    paths = {k: f"{stem}-{k}.pxa" for k in ("infer", "train", "train-bf16")}
    paths["llm"] = os.path.join(args.artifacts, artifact_name(args.quick))
    return {"quick": args.quick, "meta": meta, "paths": paths, "min_seconds": 0.3 if args.quick else 3.0, "flops": {}}


def summary(results: dict) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        return
    table = Table(title=f"BERT on {results['machine'].get('device_kind')}")
    for col in ("section", "samples/s", "ms", "TFLOP/s", "MFU (datasheet)", "MFU (measured)", "mode"):
        table.add_column(col)
    for name, r in results["sections"].items():
        if name == "peak" or not isinstance(r, dict) or "samples_per_s" not in r:
            continue
        sheet = [v for k, v in r.items() if k.startswith("mfu_vs_datasheet")]
        meas = [v for k, v in r.items() if k.startswith("mfu_vs_measured")]
        table.add_row(
            name,
            str(r["samples_per_s"]),
            str(r.get("ms_per_step", r.get("ms_per_batch"))),
            str(r.get("achieved_tflops")),
            ", ".join(f"{v:.1%}" for v in sheet),
            ", ".join(f"{v:.1%}" for v in meas),
            r["mode"],
        )
    Console(width=140).print(table)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="BERT-tiny on whatever device, a CI smoke run")
    ap.add_argument("--artifacts", default=os.path.join(HERE, "artifacts"))
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--out", default=None)
    ap.add_argument("--budget", type=float, default=200.0, help="start no section after this many seconds")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {list(SECTIONS)}")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    path = out_path(args.out)
    results: dict[str, Any] = {
        "benchmark": "gpu",
        "quick": args.quick,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "reference": GRAPHCORE_POD16,
        "sections": {},
        "errors": {},
    }
    log(f"{results['machine']}; results to {path}")
    try:
        ctx = context(args)
    except Exception as e:  # noqa: BLE001
        results["errors"]["artifacts"] = f"{type(e).__name__}: {e}. Run benchmarks/make_gpu_artifacts.py first."
        write(path, results)
        log(results["errors"]["artifacts"])
        return 1
    ctx["sheet"] = datasheet(results["machine"]["device_kind"])
    ctx["results"] = results["sections"]
    results.update(
        model=ctx["meta"]["model"],
        seq=ctx["meta"]["seq"],
        datasheet_tflops=ctx["sheet"],
        artifacts=ctx["meta"].get("artifacts"),
        bf16_train=ctx["meta"].get("bf16_train"),
    )
    for name in [s for s in args.only.split(",") if s]:
        elapsed = time.perf_counter() - t0
        if elapsed > args.budget:
            results["errors"][name] = f"skipped: {elapsed:.0f} s elapsed, over the --budget of {args.budget:.0f} s"
            log(results["errors"][name])
            continue
        log(f"section {name} ...")
        try:
            start = time.perf_counter()
            results["sections"][name] = {**SECTIONS[name](ctx), "section_seconds": None}
            results["sections"][name]["section_seconds"] = round(time.perf_counter() - start, 1)
        except Exception as e:  # noqa: BLE001  (one failing section must not lose the others)
            results["errors"][name] = f"{type(e).__name__}: {e}"
            log(f"section {name} failed: {type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}")
        results["total_seconds"] = round(time.perf_counter() - t0, 1)
        write(path, results)
    summary(results)
    log(f"done in {time.perf_counter() - t0:.0f} s; wrote {path}")
    return 0 if not results["errors"] else 2


if __name__ == "__main__":
    from paddle_xla import x64

    with x64.scope():  # NOTE: Paddle's int64 feeds for the raw JAX calls timed here, as the library's own
        sys.exit(main())
