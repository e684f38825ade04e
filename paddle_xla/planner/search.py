"""The layout planner: every Strategy the engines run on `devices` devices, each with its predicted
bytes per device and step time on a device profile, ranked. Paddle-free.

Bytes per device, for one layout (R replicas, S stages, Q sequence, T tensor, sharding, M micro-batches):
- weights, optimizer state and the batch slice, exactly as the engines hold them: a tensor split
  divides a weight by T, sharding 1 divides the optimizer state by R, sharding 3 the weights too
  (planner/costs.py has the bytes of each);
- gradients: one set the size of the weights a device updates (whole until reduce-scattered, with
  sharding 2), and the step's update temporaries, as large again, less what the activations already
  take (they are dead by the update, and XLA reuses their memory for it);
- sharding 3: the weights gathered for the forward, transiently whole;
- activations: what autodiff keeps per micro-batch (JAX's own residual count) times ACTIVATION_KEPT,
  split by T inside tensor-parallel layers and by Q along the sequence, times the micro-batches a
  schedule keeps alive; GPipe keeps every tick's residual slots for every stage unfused. A ring attention
  keeps none of attention's scores (it recomputes them); gathered, each layer's keys and values are kept
  whole. The batch slice is split by Q for the inputs the engine splits (dimension 1 divisible by Q).
  Measured on XLA:CPU against memory_analysis (arguments + temporaries) of the compiled step, 16 devices:
  tests/parallel/test_plan.py's encoder and decoder (sequence 8) and paddle_xla/models/llama.py's "tiny"
  Llama at sequence 64-512, with replicas, tensor, sharding and sequence layouts, the test models' 18
  land within 32 % (16 within 20 %), the Llama's 16 within 30 % (10 within 20 %); sharding 3 comes out
  low on the Llama (gathered weights the count leaves out), and so does a sequence split: -17 % with the
  ring at 4, 8 and 16 devices, -17 % and +1 % gathered at 4 and 16 (sequence 256, 2026-12-05).
Step time: 3 forward passes of FLOPs (4 with recomputation) at the profile's achievable rate,
divided over the devices that share the work, stretched by the pipeline bubble, plus the bytes the
layout moves (the gradient all-reduce over every device holding a whole copy of a weight, replicas x
sequence, sharding's gathers, tensor all-reduces, the sequence split's gathers of attention's keys and
values (or their ring), stage sends) over the profile's links, none of it overlapped."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import StrategyError
from ..parallel.tensor_plan import TensorPlan, keeps_vocab_whole, make_plan, without_vocab
from ..strategy import Strategy, planned_elsewhere
from .costs import ModelCosts, activations, is_token_input
from .profiles import GB, DeviceProfile

# NOTE: measured on XLA:CPU (tests/parallel/test_plan.py): at the backward's peak XLA holds about what JAX's
# autodiff lists as residuals (what fusion saves is about what the backward's own transients add back).
# The 0.25 this once was only looked right on sequence-8 models whose update temporaries, which reuse the
# activations' memory, were counted on top of them; a Llama at sequence 64-512 kept 0.9-1.5 x.
ACTIVATION_KEPT = 1.0


def planned(tensor_plan=None, **fields) -> Strategy:
    """A layout the planner proposes, as the Strategy that runs it on the machine planned (whose devices
    this process need not have): the "auto" placement with pipeline stages, `tensor_plan` with tensor > 1."""
    stages, tensor = fields.get("stages", 1), fields.get("tensor", 1)
    with planned_elsewhere():
        return Strategy(
            **fields, placement="auto" if stages > 1 else None, tensor_plan=tensor_plan if tensor > 1 else None
        )


def describe(layout: Strategy) -> str:
    """A layout in one short line: replicas x stages x tensor, then what differs from the plain step."""
    parts = [f"{layout.replicas}x{layout.stages}x{layout.tensor}"]
    if layout.sequence > 1:
        parts.append(f"sequence={layout.sequence}")
    if layout.sharding:
        parts.append(f"sharding={layout.sharding}")
    if layout.micro_batches > 1:
        parts.append(f"M={layout.micro_batches}")
    if layout.stages > 1:
        parts.append(layout.schedule)
    if layout.recompute:
        parts.append(f"recompute={layout.recompute}")
    parts.append(layout.precision)
    return " ".join(parts)


@dataclass
class Prediction:
    layout: Strategy  # as planned() builds it (no tensor_plan rules: Plan.best adds them)
    bytes: dict[str, float]  # per device: weights, gradients, optimizer, activations, other
    step_seconds: float
    samples_per_second: float
    fits: bool
    expert_bytes: float = 0.0  # of the weights, gradients and optimizer state: an MoE model's experts'

    @property
    def total_bytes(self) -> float:
        return sum(self.bytes.values())


@dataclass
class Plan:
    rows: list[Prediction]
    profile: DeviceProfile
    devices: int
    global_batch: int
    tensor_plans: Mapping[int, TensorPlan] = field(default_factory=dict)
    rules: object = None
    params: int = 0
    active_params: int = 0  # per token: an MoE layer's experts count by top_k / num_experts
    expert_params: int = 0

    @property
    def best(self) -> Strategy:
        fitting = [r for r in self.rows if r.fits]
        if not fitting:
            need = min(self.rows, key=lambda r: r.total_bytes)
            raise StrategyError(
                f"No layout of {self.devices} x {self.profile.name} fits a global batch of {self.global_batch}: the "
                f"smallest needs {need.total_bytes / GB:.2f} GB per device ({describe(need.layout)}), and a "
                f"{self.profile.name} has {self.profile.memory_bytes / GB:.2f} GB. Use more devices, a smaller "
                "batch, or a device with more memory."
            )
        best = fitting[0].layout
        if self.rules is None or best.tensor == 1:
            return best
        with planned_elsewhere():
            return dataclasses.replace(best, tensor_plan=self.rules)

    def table(self, top: int = 12) -> str:
        head = (
            f"{'layout (replicas x stages x tensor)':44s} {'GB/device':>9s} {'weights':>8s} {'grads':>7s} "
            f"{'optim':>7s} {'activ':>7s} {'step s':>8s} {'samples/s':>10s}  fits"
        )
        lines = [
            f"plan: {self.devices} x {self.profile.name} ({self.profile.memory_bytes / GB:.1f} GB each), "
            f"global batch {self.global_batch}",
        ]
        if self.expert_params:
            head += "  experts GB"
            lines.append(
                f"parameters {self.params / 1e9:.2f} B, {self.active_params / 1e9:.2f} B active per token; experts "
                f"{self.expert_params / 1e9:.2f} B, held as any weight is (whole, or split by sharding): expert "
                "parallelism is not planned yet"
            )
        lines.append(head)
        for r in self.rows[:top]:
            b = r.bytes
            line = (
                f"{describe(r.layout):44s} {r.total_bytes / GB:9.3f} {b['weights'] / GB:8.3f} "
                f"{b['gradients'] / GB:7.3f} {b['optimizer'] / GB:7.3f} {b['activations'] / GB:7.3f} "
                f"{r.step_seconds:8.4f} {r.samples_per_second:10.1f}  {'yes' if r.fits else 'NO':3s}"
            )
            lines.append(line + f"  {r.expert_bytes / GB:10.3f}" if self.expert_params else line.rstrip())
        return "\n".join(lines)


# ---- the search ----------------------------------------------------------------------------------
def layouts(devices: int, global_batch: int, precisions=("bf16", "fp32"), sequences=(1,)):
    """Every layout the engines run, as Strategies: each combination Strategy accepts (stages with
    sharding <= 1, M >= S for pipelines, a schedule only with stages, a sequence split without stages)
    whose groups split the batch. `sequences`: the sequence splits the model's inputs allow."""
    for r, s, q, t in _factorizations(devices, sequences):
        for sharding, m, recompute, schedule, precision in itertools.product(
            (0, 1, 2, 3), _micro_batches(global_batch // r), (None, "layer"), ("gpipe", "1f1b"), precisions
        ):
            try:
                layout = planned(
                    replicas=r,
                    stages=s,
                    sequence=q,
                    tensor=t,
                    sharding=sharding,
                    micro_batches=m,
                    recompute=recompute,
                    schedule=schedule,
                    precision=precision,
                )
                layout.check_batch(global_batch)
            except StrategyError:
                continue
            yield layout


def _factorizations(n: int, sequences=(1,)):
    for r in range(1, n + 1):
        if n % r == 0:
            for s in range(1, n // r + 1):
                if (n // r) % s == 0:
                    for q in sequences:
                        if (n // (r * s)) % q == 0 and (q == 1 or s == 1):
                            yield r, s, q, n // (r * s * q)


def sequence_splits(costs: ModelCosts, devices: int) -> tuple[int, ...]:
    """The sequence splits the planner offers: the degrees that divide a token input's dimension 1 (the
    sequence, 2 or more per device) and the devices."""
    lengths = [f.shape[1] for f in costs.graph.feeds if is_token_input(f)]
    return tuple(
        q
        for q in range(1, devices + 1)
        if devices % q == 0 and (q == 1 or any(n > 0 and n % q == 0 and n // q >= 2 for n in lengths))
    )


def _batch_bytes_per_sample(costs: ModelCosts, sequence: int) -> float:
    """A sample's input bytes on one device: the engine splits over the sequence devices every input whose
    dimension 1 `sequence` divides (engine.splits_sequence), float ones too, and leaves the others whole."""
    total = 0.0
    for f in costs.graph.feeds:
        nbytes = float(np.prod(f.shape[1:])) * np.dtype(f.dtype).itemsize
        split = sequence > 1 and len(f.shape) >= 2 and f.shape[1] > 0 and f.shape[1] % sequence == 0
        total += nbytes / sequence if split else nbytes
    return total


def _micro_batches(per_replica: int):
    m = 1
    while m <= per_replica and m <= 64:
        if per_replica % m == 0:
            yield m
        m *= 2


def plan(
    costs: ModelCosts,
    keys: Mapping[str, str],
    profile: DeviceProfile,
    devices: int,
    global_batch: int,
    rules=None,
    precisions=("bf16", "fp32"),
    stage_bytes=None,
) -> Plan:
    """Every runnable layout predicted and ranked: those that fit first, fastest first."""
    tplans: dict[int, TensorPlan | None] = {}
    whole_vocab: dict[int, TensorPlan] = {}  # NOTE: the plans of layouts that keep the vocab whole
    rows = []
    for lay in layouts(devices, global_batch, precisions, sequence_splits(costs, devices)):
        if lay.tensor not in tplans:
            tplans[lay.tensor] = _tensor_plan(costs, keys, rules, lay.tensor)
        tplan = tplans[lay.tensor]
        if lay.tensor > 1 and tplan is None:
            continue
        if tplan is not None and keeps_vocab_whole(lay):
            if lay.tensor not in whole_vocab:
                whole_vocab[lay.tensor] = without_vocab(tplan, costs.graph, keys, lay.tensor)
            tplan = whole_vocab[lay.tensor]
        rows.append(predict(costs, lay, profile, global_batch, tplan, stage_bytes))
    rows.sort(key=lambda r: (not r.fits, -r.samples_per_second, r.total_bytes))
    tensor_plans = {t: p for t, p in tplans.items() if p is not None}
    counts = dict(params=costs.params, active_params=costs.active_params, expert_params=costs.expert_params)
    return Plan(rows, profile, devices, global_batch, tensor_plans, rules, **counts)


def _tensor_plan(costs: ModelCosts, keys, rules, tensor: int) -> TensorPlan | None:
    if tensor == 1:
        return None
    try:
        return make_plan(costs.graph, keys, rules, tensor)
    except StrategyError:
        return None  # NOTE: this degree splits no head or dimension evenly; the layout is not offered


def predict(
    costs: ModelCosts,
    lay: Strategy,
    profile: DeviceProfile,
    global_batch: int,
    tplan: TensorPlan | None = None,
    stage_bytes=None,
) -> Prediction:
    R, S, T, M, Q = lay.replicas, lay.stages, lay.tensor, lay.micro_batches, lay.sequence
    dims = dict(tplan.dims) if tplan is not None else {}
    weights = grads = opt = experts = 0.0
    shapes = {p.name: p.shape for p in costs.graph.params}
    for name, nbytes in costs.weight_bytes.items():
        if name not in costs.trainable:
            continue
        split = T if name in dims else 1
        by_r = R if _splits_over_replicas(shapes[name], dims.get(name), R) else 1
        w = nbytes / split
        shaped, scalars = costs.opt_bytes.get(name, (0, 0))
        held = (
            w / (by_r if lay.sharding >= 3 else 1),
            w / (by_r if lay.sharding >= 2 else 1),
            shaped / split / (by_r if lay.sharding >= 1 else 1) + scalars,
        )
        weights, grads, opt = weights + held[0], grads + held[1], opt + held[2]
        experts += sum(held) if name in costs.experts else 0.0
    share = 1.0  # of the weights, on the widest stage
    if S > 1:
        share = max(stage_bytes(S)) / sum(stage_bytes(S)) if stage_bytes is not None else 1.0 / S
        weights, grads, opt, experts = weights * share, grads * share, opt * share, experts * share
    buffers = sum(n for k, n in costs.weight_bytes.items() if k not in costs.trainable)
    batch = _batch_bytes_per_sample(costs, Q) * global_batch / R
    acts = activations(costs, lay.precision, lay.recompute == "layer")
    micro = global_batch / (R * M)
    split = _activation_split(tplan, T)
    one = acts.per_sample * micro + acts.fixed  # the whole model's, for one micro-batch
    if S > 1:
        one = acts.per_sample * micro * split + acts.fixed
        # NOTE: a pipeline's scan over a switch keeps residual slots for every stage's branch, unfused
        # (pipeline.py): GPipe about 1.5 x the whole model's per tick, 1F1B about two micro-batches' worth.
        # Fitted on XLA:CPU; the planner's table in benchmarks/README.md shows how well.
        kept = 1.5 * (M + S - 1) * one if lay.schedule == "gpipe" else 2 * one
    else:
        # NOTE: a sequence split divides every activation that carries the sequence, attention's scores too
        # ([sequence / Q, sequence] per device when keys are gathered); the ring recomputes its blocks of
        # scores in the backward pass and keeps none of them
        ring = Q > 1 and lay.sequence_attention == "ring"
        per_sample = acts.per_sample - (acts.scores_per_sample if ring else 0)
        kept = ACTIVATION_KEPT * (per_sample * micro * split / Q + acts.fixed)
        if Q > 1 and not ring:
            # NOTE: gathered, every layer's keys and values are kept whole along the sequence for the backward
            # pass (their heads split over the tensor devices)
            kept += micro * (Q - 1) / Q * _attention_operand_bytes_per_sample(costs) / (T if tplan is not None else 1)
    full_weights = sum(costs.weight_bytes[n] / (T if n in dims else 1) for n in costs.trainable)
    # NOTE: sharding 3 gathers each weight whole for the forward and again for the backward; XLA:CPU held
    # one whole copy over replicas alone, two when the gathered weights are split over tensor as well.
    gathered = full_weights * (2 if T > 1 else 1) if lay.sharding >= 3 and R > 1 else 0.0
    whole_grads = full_weights * share  # a device's gradients before sharding splits them
    by = {
        "weights": weights,
        "gradients": _gradient_bytes(grads, whole_grads, kept, lay),
        "optimizer": opt,
        "activations": kept,
        "other": buffers + batch + gathered,
    }
    seconds = step_seconds(costs, lay, profile, global_batch, whole_grads, tplan)
    fits = sum(by.values()) <= profile.memory_bytes
    return Prediction(lay, by, seconds, global_batch / seconds, fits, experts)


def _gradient_bytes(grads: float, whole_grads: float, kept: float, lay: Strategy) -> float:
    """The gradients a device holds, and the update's temporaries as large again; with sharding 2 the
    gradients are whole until they are reduce-scattered."""
    temporaries = whole_grads if lay.sharding == 2 else grads
    if lay.stages > 1:
        return grads + temporaries  # NOTE: the pipelines' activation factors were fitted with this sum
    # NOTE: one stage's update runs after its backward has freed the activations, and XLA reuses their
    # memory for the update's temporaries: the peak holds the larger of the two, not their sum.
    return grads + max(temporaries - kept, 0.0)


def _splits_over_replicas(shape, tdim, replicas: int) -> bool:
    return any(d != tdim and size % replicas == 0 and size >= replicas for d, size in enumerate(shape))


def _activation_split(tplan: TensorPlan | None, tensor: int) -> float:
    """The share of activation bytes a device keeps with a tensor split: the layers between a colwise
    and a rowwise projection split theirs, attention's scores by heads, a vocab-split tied head its logits.
    Fitted on XLA:CPU with ACTIVATION_KEPT: a tied vocab-split head (the test decoder) keeps less whole, an
    untied head's whole logits (the Llama at sequence 64) more; 0.12 leaves both about 30 % off at worst."""
    if tplan is None or tensor == 1:
        return 1.0
    return 0.12 + 0.88 / tensor


def step_seconds(
    costs: ModelCosts, lay: Strategy, profile: DeviceProfile, global_batch: int, grads: float, tplan: TensorPlan | None
) -> float:
    """`grads`: the bytes of the gradients of the weights one device computes, whole (before sharding
    splits them), that is its stage's weights, split by T."""
    R, S, T, M, Q = lay.replicas, lay.stages, lay.tensor, lay.micro_batches, lay.sequence
    passes = 4 if lay.recompute else 3
    compute = passes * costs.flops_per_sample * global_batch / (R * S * T * Q) / profile.rate(lay.precision)
    bubble = (S - 1) / (M + S - 1) if S > 1 else 0.0
    compute /= 1 - bubble
    bw = profile.link_gbytes * 1e9
    moved = 0.0
    moved += gradient_bytes_moved(grads, R, Q, lay.sharding)
    if T > 1:
        # NOTE: a rowwise projection's output is all-reduced over the tensor devices, forward and backward.
        moved += 2 * 2 * (T - 1) / T * _rowwise_bytes_per_sample(costs, tplan) * global_batch / R
    if Q > 1:
        # NOTE: attention's keys and values: gathered over the sequence devices in the forward and their
        # gradients reduce-scattered in the backward (2 passes), or, round the ring, passed on Q - 1 times in
        # the forward and again with their gradients in the backward (3).
        passes = 3 if lay.sequence_attention == "ring" else 2
        moved += passes * (Q - 1) / Q * _attention_operand_bytes_per_sample(costs) * global_batch / R / T
    return compute + moved / bw


def gradient_bytes_moved(grads: float, replicas: int, sequence: int, sharding: int) -> float:
    """Bytes one device sends to sum the gradients (`grads` bytes, whole) over every device that holds a
    whole copy of the weights: its replicas and its sequence devices, R x Q of them (the engine psums over
    replicas, GSPMD sums the sequence devices' partial gradients), as a ring all-reduce moves them.
    Sharding 1 and 2 move as much (reduce-scatter, then the updated weights all-gathered); sharding 3
    gathers the weights over the replicas once more, for the backward."""
    group = replicas * sequence
    moved = 2 * (group - 1) / group * grads
    if sharding >= 3:
        moved += (replicas - 1) / replicas * grads
    return moved


def _attention_operand_bytes_per_sample(costs: ModelCosts) -> float:
    """Bytes per sample of the second operands of matmuls between activations (attention's keys and values)."""
    params = {p.value for p in costs.graph.params}
    return sum(
        costs.value_bytes_per_sample.get(op.inputs[1], 0.0)
        for op in costs.graph.block.ops
        if op.name == "pd_op.matmul" and op.inputs[0] not in params and op.inputs[1] not in params
    )


def _rowwise_bytes_per_sample(costs: ModelCosts, tplan: TensorPlan | None) -> float:
    """Bytes per sample of the outputs of the matmuls whose weight the plan splits rowwise."""
    if tplan is None:
        return 0.0
    rowwise = {n for n, d in tplan.dims.items() if d == 0}
    params = {p.value: p.name for p in costs.graph.params}
    return sum(
        costs.value_bytes_per_sample.get(op.outputs[0], 0.0)
        for op in costs.graph.block.ops
        if op.name == "pd_op.matmul" and params.get(op.inputs[1]) in rowwise
    )
