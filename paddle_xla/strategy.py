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
| tensor                | devices each layer is split over (tensor parallelism, GSPMD) | (IPU: tensor splitting)   |
| tensor_plan           | what is split: None/"auto", or {layer-path rule: "colwise" | "rowwise" | "vocab"} (or Paddle's dist.ColWiseParallel() / RowWiseParallel()) | |
| sharding              | 0-3, Paddle's ShardingStage: 1 optimizer state, 2 + gradients, 3 + parameters, over replicas | replicated tensor sharding |
| sequence              | devices the sequence is split over (context parallelism: activations split along dimension 1 of the inputs) | (Paddle: sep / context parallel) |
| sequence_attention    | "ring" (key/value blocks passed round the sequence devices) | "gather" (each gathers all keys/values) | |
| shard_optimizer_state | ZeRO-1 over replicas (the same as sharding=1)                 | replicated tensor sharding|
| schedule              | pipeline schedule: "gpipe" | "1f1b" (memory flat in micro_batches) | (IPU: pipelined by default)|
| loss_reduction        | "auto" | "mean" | "sum": how micro-batch losses combine        |                           |
| quant_type            | None | "weight_only_int8": a generator's matmul weights as int8 (inference) | Paddle's weight_quantize algo |

Everything is checked here, on construction, that can be checked without the model: field values,
and that the devices exist. What needs the program (a stage rule that matches no layer, a stage left
without ops, a batch that does not split) is checked when `train_step` builds the step, before any
compile; every message names the fix.

Devices: the mesh takes the first replicas x stages x tensor devices. In a multi-process run (`paddle-xla
launch`) a layout over several devices must take all of them, since every process joins each step.

The default Strategy() runs the plain one-device step; anything else runs paddle_xla.parallel's
SPMD engine, which gives the same numbers (tests/parallel prove it for every layout).
"""  # noqa: E501 (the Markdown table above: its rows cannot wrap)

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import StrategyError

# NOTE: off while the planner builds Strategies for another machine (planned_elsewhere).
_CHECK_DEVICES: contextvars.ContextVar[bool] = contextvars.ContextVar("check_devices", default=True)

PRECISIONS = ("fp32", "bf16", "fp16")
RECOMPUTE = (None, "full", "stage", "layer")
QUANT_TYPES = ("weight_only_int8",)  # Paddle's weight_quantize algo names that px.Generator holds weights in
SCHEDULES = ("gpipe", "1f1b")
SHARDING = (0, 1, 2, 3)
TENSOR_KINDS = ("colwise", "rowwise", "vocab")
# NOTE: Paddle's parallelize-plan classes (paddle.distributed), by the split each names: ColWiseParallel
# splits a weight's second dimension (and the bias), RowWiseParallel its first (an Embedding's vocab).
PADDLE_PLANS = {"ColWiseParallel": "colwise", "RowWiseParallel": "rowwise"}
REDUCTIONS = ("auto", "mean", "sum")
SEQUENCE_ATTENTION = ("ring", "gather")
_AUTO = "auto"


@contextlib.contextmanager
def planned_elsewhere() -> Iterator[None]:
    """Strategies built inside do not check this process's devices: they are for the machine planned."""
    token = _CHECK_DEVICES.set(False)
    try:
        yield
    finally:
        _CHECK_DEVICES.reset(token)


@dataclass(frozen=True)
class LossScale:
    """Dynamic loss scaling for fp16: skip a step and lower the scale on overflow; raise it after
    `growth_interval` clean steps in a row. The defaults are paddle.amp.GradScaler's
    (init_loss_scaling=65536, incr_ratio=2, decr_ratio=0.5, incr_every_n_steps=2000).
    `dynamic=False` keeps the scale fixed (still skipping non-finite steps)."""

    init: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    dynamic: bool = True

    def __post_init__(self) -> None:
        if not self.init > 0 or not self.growth_factor >= 1 or not 0 < self.backoff_factor <= 1:
            raise StrategyError(
                f"LossScale needs init > 0, growth_factor >= 1 and 0 < backoff_factor <= 1; "
                f"got {self}. The defaults (LossScale()) are Paddle's GradScaler's."
            )
        if not isinstance(self.growth_interval, int) or self.growth_interval < 1:
            raise StrategyError(f"LossScale.growth_interval must be a positive int, got {self.growth_interval!r}.")


@dataclass(frozen=True)
class Strategy:
    replicas: int = 1
    stages: int = 1
    placement: Any = None  # None | "auto" | {layer-path rule: stage}
    micro_batches: int = 1
    steps_per_call: int = 1
    precision: str = "fp32"
    recompute: str | None = None
    shard_optimizer_state: bool = False
    loss_scale: Any = _AUTO  # fp16: LossScale (default LossScale()); others: None
    schedule: str = "gpipe"
    loss_reduction: str = "auto"  # "auto": read from the program (mean or sum of the batch)
    tensor: int = 1
    tensor_plan: Any = None  # None | "auto" | {layer-path rule: "colwise" | "rowwise" | "vocab"}
    sharding: int = 0  # 0 | 1 (optimizer state) | 2 (+ gradients) | 3 (+ parameters)
    sequence: int = 1  # devices each sequence is split over (context parallelism)
    sequence_attention: str = "ring"  # "ring" | "gather": how attention reads keys of other devices
    quant_type: str | None = None  # None | "weight_only_int8" (px.Generator only)

    def __post_init__(self) -> None:
        for name in ("replicas", "stages", "micro_batches", "steps_per_call", "tensor", "sequence"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise StrategyError(f"Strategy.{name} must be a positive int, got {v!r}.")
        if self.precision not in PRECISIONS:
            raise StrategyError(f"Strategy.precision must be one of {PRECISIONS}, got {self.precision!r}.")
        if self.recompute not in RECOMPUTE:
            raise StrategyError(f"Strategy.recompute must be one of {RECOMPUTE}, got {self.recompute!r}.")
        if self.schedule not in SCHEDULES:
            raise StrategyError(f"Strategy.schedule must be one of {SCHEDULES}, got {self.schedule!r}.")
        if self.schedule != "gpipe" and self.stages == 1:
            raise StrategyError(
                f"schedule={self.schedule!r} orders the micro-batches of pipeline stages, but "
                "stages=1; set stages > 1 or drop schedule."
            )
        if self.quant_type not in (None,) + QUANT_TYPES:
            raise StrategyError(
                f"Strategy.quant_type must be None or one of {QUANT_TYPES} (Paddle's weight_quantize "
                f"algo names), got {self.quant_type!r}."
            )
        if self.loss_reduction not in REDUCTIONS:
            raise StrategyError(f"Strategy.loss_reduction must be one of {REDUCTIONS}, got {self.loss_reduction!r}.")
        self._check_loss_scale()
        self._check_sharding()
        self._check_tensor()
        if self.sequence_attention not in SEQUENCE_ATTENTION:
            raise StrategyError(
                f"Strategy.sequence_attention must be one of {SEQUENCE_ATTENTION}, got {self.sequence_attention!r}."
            )
        if self.sequence > 1 and self.stages > 1:
            raise StrategyError(
                f"sequence={self.sequence} with pipeline stages is not supported yet; use "
                "stages=1 (replicas x sequence x tensor), or sequence=1 with stages."
            )
        if self.stages > 1 and self.micro_batches < self.stages:
            raise StrategyError(
                f"With {self.stages} pipeline stages, micro_batches must be at least {self.stages} (got "
                f"{self.micro_batches}) or most stages sit idle; e.g. micro_batches={2 * self.stages}."
            )
        self._check_placement()
        if _CHECK_DEVICES.get():
            self.check_devices()

    def _check_loss_scale(self) -> None:
        ls = self.loss_scale
        if ls == _AUTO:
            object.__setattr__(self, "loss_scale", LossScale() if self.precision == "fp16" else None)
        elif self.precision == "fp16" and not isinstance(ls, LossScale):
            raise StrategyError(
                f"precision='fp16' needs loss scaling (got loss_scale={ls!r}): fp16 gradients underflow "
                "without it. Leave loss_scale out for Paddle's dynamic defaults, or pass "
                "LossScale(init=1.0, dynamic=False) to train unscaled on purpose."
            )
        elif self.precision != "fp16" and ls is not None:
            raise StrategyError(
                f"Strategy.loss_scale applies to precision='fp16' only; {self.precision} "
                "needs none (bf16 has float32's exponent range)."
            )

    def _check_sharding(self) -> None:
        if self.sharding not in SHARDING or isinstance(self.sharding, bool):
            raise StrategyError(
                f"Strategy.sharding must be one of {SHARDING} (Paddle's sharding stages: 1 the "
                f"optimizer state, 2 also gradients, 3 also parameters), got {self.sharding!r}."
            )
        if self.shard_optimizer_state and self.sharding == 0:
            object.__setattr__(self, "sharding", 1)  # NOTE: the older name of sharding=1
        object.__setattr__(self, "shard_optimizer_state", self.sharding >= 1)
        if self.sharding and self.replicas == 1:
            raise StrategyError(
                f"sharding={self.sharding} splits state across replicas, but replicas=1; set "
                "replicas > 1 or drop sharding (shard_optimizer_state)."
            )
        if self.sharding >= 2 and self.stages > 1:
            raise StrategyError(
                f"sharding={self.sharding} with pipeline stages is not supported yet; use "
                "sharding=1 with stages, or stages=1 (replicas x tensor) with sharding 2 or 3."
            )

    def _check_tensor(self) -> None:
        plan = self.tensor_plan
        if plan is None or plan == "auto":
            return
        if not isinstance(plan, Mapping):
            raise StrategyError(
                f"Strategy.tensor_plan must be None, 'auto' or a dict {{layer-path rule: kind}}, got {plan!r}."
            )
        if self.tensor == 1:
            raise StrategyError(
                "tensor_plan splits layers over the tensor axis, but tensor=1; set tensor > 1 "
                "(e.g. tensor=4) or drop tensor_plan."
            )
        kinds = {}
        for rule, kind in plan.items():
            kind = PADDLE_PLANS.get(type(kind).__name__, kind)
            if kind not in TENSOR_KINDS:
                raise StrategyError(
                    f"tensor_plan rule {rule!r} asks for {kind!r}; use one of {TENSOR_KINDS}, or "
                    "paddle.distributed.ColWiseParallel() / RowWiseParallel()."
                )
            kinds[rule] = kind
        # NOTE: stored by name, so the Strategy stays plain data (to_dict, artifacts).
        object.__setattr__(self, "tensor_plan", kinds)
        for rule in kinds:
            for alternative in rule.split("|"):
                parse_rule(alternative)

    def _check_placement(self) -> None:
        p = self.placement
        if p is None or p == "auto":
            if p == "auto" and self.stages == 1:
                raise StrategyError(
                    "placement='auto' balances ops over pipeline stages, but stages=1; "
                    "set stages > 1 or drop placement."
                )
            return
        if not isinstance(p, Mapping):
            raise StrategyError(f"Strategy.placement must be None, 'auto' or a dict of layer-path rules, got {p!r}.")
        if self.stages == 1:
            raise StrategyError(
                "placement rules assign layers to pipeline stages, but stages=1; set stages > 1 or drop placement."
            )
        bad = {k: v for k, v in p.items() if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < self.stages}
        if bad:
            raise StrategyError(
                f"placement rules {bad} name stages outside 0..{self.stages - 1}; "
                f"with stages={self.stages} use stage numbers 0 to {self.stages - 1}."
            )
        for rule in p:
            parse_rule(rule)

    def check_devices(self) -> None:
        """That this process sees the devices the layout takes (the engines ask again before they build)."""
        import jax

        have = jax.device_count()
        need = self.devices
        layout = (
            f"replicas x stages x sequence x tensor = {self.replicas} x {self.stages} x {self.sequence} x "
            f"{self.tensor} = {need}"
        )
        if need > have:
            raise StrategyError(
                f"{layout} devices, but only {have} are visible ({jax.devices()[0].platform}). Lower replicas, "
                f"stages, sequence or tensor, or on CPU set XLA_FLAGS=--xla_force_host_platform_device_count={need} "
                "before importing jax."
            )
        if jax.process_count() > 1 and 1 < need != have:
            raise StrategyError(
                f"{layout}, but this multi-process run has {have} devices over {jax.process_count()} processes, "
                f"and every process must take part; choose a layout of {have} devices."
            )

    @property
    def devices(self) -> int:
        return self.replicas * self.stages * self.sequence * self.tensor

    @property
    def groups(self) -> int:
        """Equal parts one batch is split into: replicas x micro-batches."""
        return self.replicas * self.micro_batches

    @property
    def is_default(self) -> bool:
        """True when nothing is spread out: one device, one micro-batch, fp32, no recompute."""
        return (
            self.devices,
            self.micro_batches,
            self.steps_per_call,
            self.precision,
            self.recompute,
            self.loss_reduction,
        ) == (1, 1, 1, "fp32", None, "auto")

    def check_batch(self, batch: int) -> None:
        """The global batch must split evenly into replicas x micro-batches."""
        parts = self.groups
        if batch % parts:
            good = max(parts, batch - batch % parts)
            raise StrategyError(
                f"A batch of {batch} does not split into replicas x micro_batches = {self.replicas} x "
                f"{self.micro_batches} = {parts} equal parts; use a batch size divisible by {parts} "
                f"(e.g. {good}), or change micro_batches."
            )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: Mapping) -> Strategy:
        d = dict(d)
        # NOTE: artifacts written before Strategy.extra was removed (never read) carry "extra": {}.
        d.pop("extra", None)
        if isinstance(d.get("loss_scale"), Mapping):
            d["loss_scale"] = LossScale(**d["loss_scale"])
        return Strategy(**d)


# ---- layer-path rules (Strategy.placement, Strategy.tensor_plan) ----------------------------------
# NOTE: the syntax of the keys of Strategy.placement and tensor_plan, checked here so that a bad rule
# fails when the Strategy is built; parallel/rules.py says how a rule matches weights.
_RANGE = re.compile(r"^(\d+)-(\d+|\*)$")


@dataclass(frozen=True)
class Rule:
    text: str
    parts: tuple[str, ...]

    def matches(self, key: str) -> bool:
        names = key.split(".")
        n = len(self.parts)
        return any(
            all(_part_matches(p, k) for p, k in zip(self.parts, names[i : i + n])) for i in range(len(names) - n + 1)
        )


def _part_matches(part: str, name: str) -> bool:
    if part == "*" or part == name:
        return True
    m = _RANGE.match(part)
    if m and name.isdigit():
        hi = m[2]
        return int(m[1]) <= int(name) and (hi == "*" or int(name) <= int(hi))
    return False


def parse_rule(text: object) -> Rule:
    if not isinstance(text, str) or not text.strip():
        raise StrategyError(f"A placement rule must be a layer path such as 'encoder.layers.0-3', got {text!r}.")
    parts = tuple(text.strip().strip(".").split("."))
    for part in parts:
        m = _RANGE.match(part)
        if not part or (m and m[2] != "*" and int(m[1]) > int(m[2])):
            raise StrategyError(
                f"Placement rule {text!r} has a bad part {part!r}: use names, '*', N or N-M "
                "with N <= M, joined by dots, e.g. 'encoder.layers.0-3'."
            )
    return Rule(text, parts)
