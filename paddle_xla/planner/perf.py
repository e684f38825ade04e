"""What the machine can do and what a model needs: the measured matmul peak and analytic BERT FLOPs.

Shared by `paddle-xla bench` and benchmarks/; imports neither paddle nor (at module level) jax."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any


def matmul_rate(n: int, dtype: str, out_dtype: str | None, repeats: int) -> tuple[float, float]:
    """(GFLOP/s by the wall clock, GFLOP per CPU-second) of one jitted n x n x n jnp matmul (2 n^3 FLOPs),
    each the best of `repeats` calls after a compiling one."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32).astype(dtype)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32).astype(dtype)
    f = jax.jit(lambda a, b: jnp.matmul(a, b, preferred_element_type=out_dtype))
    return best_rate(lambda: f(a, b).block_until_ready(), 2 * n**3, repeats)


def best_rate(call: Callable[[], Any], flops: float, repeats: int) -> tuple[float, float]:
    call()
    wall = cpu = float("inf")
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        call()
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    return flops / wall / 1e9, flops / max(cpu, 1e-9) / 1e9


def matmul_peak(sizes: Sequence[int] = (2048, 4096), repeats: int = 5) -> dict[str, Any]:
    """The machine's measured matmul peak: best over sizes of f32 x f32 -> f32 and bf16 x bf16 -> f32.

    Beside the wall-clock rate, the rate per CPU-second (all threads' CPU time): on a machine shared
    with other work the wall clock is stretched, while the work per CPU-second barely moves."""
    f32 = {n: matmul_rate(n, "float32", None, repeats) for n in sizes}
    bf16 = {n: matmul_rate(n, "bfloat16", "float32", repeats) for n in sizes}
    return {
        "fp32_gflops": round(max(w for w, _ in f32.values()), 2),
        "bf16_f32acc_gflops": round(max(w for w, _ in bf16.values()), 2),
        "fp32_gflops_per_cpu_second": round(max(c for _, c in f32.values()), 2),
        "bf16_gflops_per_cpu_second": round(max(c for _, c in bf16.values()), 2),
        "fp32_by_size": {str(n): round(w, 2) for n, (w, _) in f32.items()},
        "bf16_by_size": {str(n): round(w, 2) for n, (w, _) in bf16.items()},
        "sizes": list(sizes),
        "repeats": repeats,
        "how": "jax.jit(jnp.matmul), block_until_ready, best of `repeats` after a warm-up call",
    }


def bert_flops(*, layers: int, hidden: int, intermediate: int, batch: int, seq: int, pooler: bool = True) -> float:
    """Forward FLOPs of a BERT encoder, counted analytically: 2 x (weights in matmuls) x tokens, plus
    QK^T and PV (2 x 2 x B x S x S x H per layer). Elementwise work (softmax, gelu, layer_norm) is left out."""
    tokens = batch * seq
    per_layer = 2 * (4 * hidden * hidden + 2 * hidden * intermediate) * tokens + 2 * 2 * batch * seq * seq * hidden
    return float(layers * per_layer + (2 * hidden * hidden * batch if pooler else 0))


def bert_pretraining_flops(
    *, layers: int, hidden: int, intermediate: int, vocab: int, batch: int, seq: int, head_tokens: int | None = None
) -> float:
    """FLOPs of one BERT pretraining step: 3 x forward (backward = 2 x forward), the forward being the
    encoder (bert_flops) plus the MLM head (transform H x H, tied decoder H x vocab) over `head_tokens`
    (default every token; batch x max_predictions when the head scores only the masked positions).
    This is the "6 x params x tokens + attention" count, params being the weights that multiply
    (embedding lookups and the per-sample pooler/NSP work are not matmuls per token)."""
    head = 2 * (batch * seq if head_tokens is None else head_tokens) * (hidden * hidden + hidden * vocab)
    return 3 * (bert_flops(layers=layers, hidden=hidden, intermediate=intermediate, batch=batch, seq=seq) + head)
