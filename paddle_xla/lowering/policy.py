"""LoweringPolicy: every choice in turning a Graph into a JAX function that is not the program's own.

- precision: "fp32", or Paddle AMP O1 in "bf16"/"fp16" (half compute, float32 master weights);
- target: the platform the function is tuned for ("cpu", "cuda", "rocm", "tpu"). Kernel forms
  measured faster on XLA:CPU only (1x1 convolutions as GEMMs, attention's dot layout) are chosen
  for "cpu" alone, so an export for another platform never carries them;
- channels_last: CNN activations held NHWC between the ops that take them (channels_last.py);
- hwio_filters: convolution filters arrive as HWIO, held so by an inference runtime (layouts.py);
- nk_weights: float32 matmul weights arrive as [N, K], held so by an inference runtime (layouts.py);
- forward_only: the function is evaluated, never differentiated (inference), so a kernel form whose
  gradient would differ from Paddle's (a max pool as shifted maxima splits ties) may be chosen.

One object, given to lower() and written into every artifact with LOWERING_VERSION, so a
re-lowered artifact can say when its numbers may have moved. Paddle-free."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax

from ..errors import LoweringError
from ..strategy import PRECISIONS

# NOTE: bump whenever a lowering's numbers may change (a new kernel form, a new cast), so that an
# artifact re-lowered by a later paddle_xla says its results may differ from the exported ones.
LOWERING_VERSION = 5  # 5: float32 matmul weights held as [N, K] on CPU (layouts.matmul_nk)
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")  # jax.export's platform names


def live_platform() -> str:
    """This process's platform in jax.export's names ('cpu', 'cuda', 'rocm', 'tpu')."""
    # NOTE: jax.default_backend() says 'gpu' for both CUDA and ROCm; an export is for one of them.
    return jax.export.default_export_platform()


@dataclass(frozen=True)
class LoweringPolicy:
    precision: str = "fp32"
    target: str = "cpu"
    channels_last: bool = False
    hwio_filters: bool = False
    nk_weights: bool = False
    forward_only: bool = False

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise LoweringError(f"LoweringPolicy.precision must be one of {PRECISIONS}, not {self.precision!r}.")
        if self.target not in PLATFORMS:
            raise LoweringError(f"LoweringPolicy.target must be one of {PLATFORMS}, not {self.target!r}.")

    @classmethod
    def tuned(cls, target: str, precision: str = "fp32", inference: bool = False) -> LoweringPolicy:
        """The measured best for `target`. On XLA:CPU: CNN activations channels-last (ResNet-50 b8
        bf16 training step 1.81 -> 1.57 s) and, for inference (the runtime holds the weights between
        calls), convolution filters as HWIO (ResNet-50 b8 inference 512 -> 451 ms) and float32 matmul
        weights as [N, K] (layouts.py has the figures)."""
        cpu = target == "cpu"
        held = cpu and inference
        return cls(
            precision,
            target,
            channels_last=cpu,
            hwio_filters=held,
            nk_weights=held and precision == "fp32",
            forward_only=inference,
        )

    @classmethod
    def live(cls, precision: str = "fp32", inference: bool = False) -> LoweringPolicy:
        """tuned() for the platform this process compiles for."""
        return cls.tuned(live_platform(), precision, inference)

    @property
    def on_cpu(self) -> bool:
        return self.target == "cpu"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LoweringPolicy:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise LoweringError(f"LoweringPolicy has no fields {unknown}; it was written by a newer paddle_xla.")
        return cls(**d)
