"""Strategy: how one program is spread over devices. A frozen dataclass, validated on construction.

| field                 | meaning                                                      | Paddle-IPU / PopTorch     |
|-----------------------|--------------------------------------------------------------|---------------------------|
| replicas              | data-parallel copies                                         | replicated_graph_count    |
| stages                | pipeline stages per replica                                  | ipu_stage / BeginBlock    |
| placement             | ops -> stages: "auto", rules {layer path: stage}, px.stage() | ipu_shard_guard / AutoStage|
| micro_batches         | micro-batches per optimizer step (pipeline / accumulation)   | accumulation_factor       |
| steps_per_call        | optimizer steps per host call (lax.scan on the device)       | batches_per_step          |
| precision             | fp32 | bf16 | fp16 (dynamic loss scaling); fp32 master weights | enable_fp16, loss_scaling |
| recompute             | None | "full" | "stage" | "layer"  (jax.checkpoint)         | auto_recomputation        |
| shard_optimizer_state | ZeRO-1 over replicas                                         | replicated tensor sharding|
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import StrategyError

PRECISIONS = ("fp32", "bf16", "fp16")
RECOMPUTE = (None, "full", "stage", "layer")
SCHEDULES = ("gpipe", "1f1b")


@dataclass(frozen=True)
class LossScale:
    """Dynamic loss scaling for fp16: skip a step and divide the scale on overflow; multiply it after
    `growth_interval` clean steps (Paddle's AMP GradScaler defaults)."""
    init: float = 2.0 ** 15
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 1000
    dynamic: bool = True


@dataclass(frozen=True)
class Strategy:
    replicas: int = 1
    stages: int = 1
    placement: Any = None                 # None | "auto" | {layer-path rule: stage}
    micro_batches: int = 1
    steps_per_call: int = 1
    precision: str = "fp32"
    recompute: str | None = None
    shard_optimizer_state: bool = False
    loss_scale: LossScale | None = None   # fp16 only; default LossScale() when precision="fp16"
    schedule: str = "gpipe"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        for name in ("replicas", "stages", "micro_batches", "steps_per_call"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise StrategyError(f"Strategy.{name} must be a positive int, got {v!r}.")
        if self.precision not in PRECISIONS:
            raise StrategyError(f"Strategy.precision must be one of {PRECISIONS}, got {self.precision!r}.")
        if self.recompute not in RECOMPUTE:
            raise StrategyError(f"Strategy.recompute must be one of {RECOMPUTE}, got {self.recompute!r}.")
        if self.schedule not in SCHEDULES:
            raise StrategyError(f"Strategy.schedule must be one of {SCHEDULES}, got {self.schedule!r}.")
        if self.precision == "fp16" and self.loss_scale is None:
            object.__setattr__(self, "loss_scale", LossScale())
        if self.precision != "fp16" and self.loss_scale is not None:
            raise StrategyError("Strategy.loss_scale applies to precision='fp16' only; bf16 and fp32 need none.")
        if self.stages > 1 and self.micro_batches < self.stages:
            raise StrategyError(
                f"With {self.stages} pipeline stages, micro_batches must be at least {self.stages} (got "
                f"{self.micro_batches}) or most stages sit idle; e.g. micro_batches={2 * self.stages}.")
        self._check_placement()
        self._check_devices()

    def _check_placement(self):
        p = self.placement
        if p is None or p == "auto":
            return
        if not isinstance(p, Mapping):
            raise StrategyError(f"Strategy.placement must be None, 'auto' or a dict of layer-path rules, got {p!r}.")
        bad = {k: v for k, v in p.items() if not isinstance(v, int) or not 0 <= v < self.stages}
        if bad:
            raise StrategyError(f"placement rules {bad} name stages outside 0..{self.stages - 1}.")
        if self.stages == 1:
            raise StrategyError("placement rules need stages > 1.")

    def _check_devices(self):
        import jax
        have = jax.device_count()
        need = self.devices
        if need > have:
            raise StrategyError(
                f"replicas x stages = {self.replicas} x {self.stages} = {need} devices, but only {have} are "
                f"visible ({jax.devices()[0].platform}). Lower replicas or stages, or on CPU set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={need} before importing jax.")

    @property
    def devices(self) -> int:
        return self.replicas * self.stages

    def check_batch(self, batch: int) -> None:
        """The global batch must split evenly into replicas x micro-batches."""
        parts = self.replicas * self.micro_batches
        if batch % parts:
            raise StrategyError(
                f"A batch of {batch} does not split into replicas x micro_batches = {self.replicas} x "
                f"{self.micro_batches} = {parts} equal parts; use a batch size divisible by {parts}.")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: Mapping) -> "Strategy":
        d = dict(d)
        if d.get("loss_scale") is not None:
            d["loss_scale"] = LossScale(**d["loss_scale"])
        return Strategy(**d)
