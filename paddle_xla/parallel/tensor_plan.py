"""What the tensor axis splits: for each weight, the dimension split over `tensor` devices.

Under GSPMD a split never changes the numbers, only where they are computed and what is sent, so
a plan is a performance choice. Megatron's is the one to aim for: in a transformer block the
attention projections q/k/v and the first FFN linear split their outputs ("colwise", Paddle's
ColWiseParallel: weight dim 1, bias dim 0), the attention output and the second FFN linear split
their inputs ("rowwise", RowWiseParallel: weight dim 0), so one all-reduce per pair is all that
crosses devices. A word embedding splits its vocab ("vocab": weight dim 0, as RowWiseParallel does
to an Embedding).

A plan comes from the model's own dist.shard_tensor annotations when it has them and the Strategy
names no rules, from `Strategy.tensor_plan` rules on layer paths, or, with "auto" (the default), from
the program itself: each weight matmul is paired with the weight matmuls that feed it through
activations and attention, and embeddings split their vocab. Paddle-free."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import StrategyError
from ..graph import Graph
from ..strategy import parse_rule
from .graphs import DataFlow

# NOTE: ops that normalise or mix the hidden dimension as a whole: a colwise output must not cross them.
_STOP = frozenset(
    f"pd_op.{n}"
    for n in ("layer_norm", "rms_norm", "batch_norm", "batch_norm_", "group_norm", "embedding", "fused_rms_norm")
)
# NOTE: ops that read only their operand's shape (a reshape's target computed from x.shape).
_SHAPE_ONLY = frozenset({"pd_op.shape", "pd_op.shape64"})


@dataclass(frozen=True)
class TensorPlan:
    dims: Mapping[str, int]  # weight name -> the dimension split over the tensor axis
    layers: Mapping[str, str]  # layer path -> "colwise" | "rowwise" | "vocab"
    how: str  # "rules" | "auto" | "annotations" (dist.shard_tensor in the model)

    def describe(self, tensor: int) -> str:
        lines = [f"tensor plan ({self.how}, {len(self.layers)} layers split over tensor={tensor}):"]
        for layer, kind in sorted(self.layers.items()):
            lines.append(f"  {kind:8s} {layer}")
        return "\n".join(lines)


def tensor_plan_for(graph: Graph, keys: Mapping[str, str], strategy, verbose: bool = True) -> TensorPlan | None:
    """The plan a Strategy asks for (None without a tensor axis), printed before anything compiles."""
    if strategy is None or strategy.tensor == 1:
        return None
    plan = make_plan(graph, keys, strategy.tensor_plan, strategy.tensor)
    note = ""
    if keeps_vocab_whole(strategy) and "vocab" in plan.layers.values():
        plan = without_vocab(plan, graph, keys, strategy.tensor)
        note = "\n  (vocab splits kept whole: with replicas and sequence together XLA's partitioner cannot split them)"
    if verbose:
        print(plan.describe(strategy.tensor) + note)
    return plan


def keeps_vocab_whole(strategy) -> bool:
    """XLA's SPMD partitioner aborts the process (a failed CHECK in spmd_partitioner_util) on a vocab-split
    projection whose input is split along the sequence inside the replicas' shard_map; kept whole, the
    numbers are the same and the sequence split still holds."""
    return strategy.sequence > 1 and strategy.replicas > 1


def without_vocab(plan: TensorPlan, graph: Graph, keys: Mapping[str, str], tensor: int) -> TensorPlan:
    layers = {layer: kind for layer, kind in plan.layers.items() if kind != "vocab"}
    shapes = {p.name: tuple(p.shape) for p in graph.params}
    return TensorPlan(_dims(layers, keys, shapes, tensor), layers, plan.how)


def make_plan(graph: Graph, keys: Mapping[str, str], rules, tensor: int) -> TensorPlan:
    """The plan for `rules` (Strategy.tensor_plan: None/"auto", or {rule: kind}); `keys` maps weight
    names to their state_dict keys. Raises StrategyError for a rule that matches nothing or a split
    dimension `tensor` does not divide."""
    shapes = {p.name: tuple(p.shape) for p in graph.params}
    annotated = _annotated_dims(graph)
    if (rules is None or rules == "auto") and annotated:
        return _from_annotations(graph, keys, annotated, shapes, tensor)
    if rules is None or rules == "auto":
        layers = _auto_layers(graph, keys, shapes, tensor)
        how = "auto"
    else:
        layers = _ruled_layers(rules, keys)
        how = "rules"
    dims = _dims(layers, keys, shapes, tensor)
    _check_heads(graph, keys, layers, tensor)
    return TensorPlan(dims, layers, how)


# ---- rules ----------------------------------------------------------------------------------
def _layer_of(key: str) -> tuple[str, str]:
    layer, _, leaf = key.rpartition(".")
    return layer, leaf


def _matches_end(rule, layer: str) -> bool:
    """A rule names a layer: its parts match the layer path's last parts ('*.linear1' matches
    'encoder.layers.0.linear1', not the layers inside 'encoder')."""
    names = layer.split(".")
    n = len(rule.parts)
    return len(names) >= n and rule.matches(".".join(names[-n:]))


def _ruled_layers(rules: Mapping[str, str], keys: Mapping[str, str]) -> dict[str, str]:
    layers = sorted({_layer_of(k)[0] for k in keys.values()})
    out: dict[str, tuple[int, str, str]] = {}
    unused = []
    for text, kind in rules.items():
        hit = False
        for alt in text.split("|"):
            rule = parse_rule(alt)
            for layer in layers:
                if _matches_end(rule, layer):
                    hit = True
                    best = out.get(layer)
                    if best is None or len(rule.parts) > best[0]:
                        out[layer] = (len(rule.parts), kind, alt)
                    elif len(rule.parts) == best[0] and best[1] != kind:
                        raise StrategyError(
                            f"The layer {layer!r} matches tensor_plan rules {best[2]!r} -> {best[1]} "
                            f"and {alt!r} -> {kind} equally; make one of them more specific."
                        )
        if not hit:
            unused.append(text)
    if unused:
        sample = ", ".join(layers[:6])
        raise StrategyError(
            f"The tensor_plan rule(s) {unused} match no layer of the model. A rule names layers "
            f"by their paths as in net.state_dict() keys, '*' for any one part, e.g. {sample} ..."
        )
    return {layer: kind for layer, (_, kind, _) in out.items()}


def _split_dim(kind: str, leaf: str, ndim: int) -> int | None:
    """Paddle's plans: colwise splits a weight's dim 1 and its bias; rowwise and vocab a weight's dim 0."""
    if ndim == 2:
        return 1 if kind == "colwise" else 0
    if ndim == 1 and kind == "colwise" and leaf == "bias":
        return 0
    return None


def _dims(layers: Mapping[str, str], keys: Mapping[str, str], shapes, tensor: int) -> dict[str, int]:
    out = {}
    for name, key in keys.items():
        layer, leaf = _layer_of(key)
        kind = layers.get(layer)
        if kind is None or name not in shapes:
            continue
        dim = _split_dim(kind, leaf, len(shapes[name]))
        if dim is None:
            continue
        size = shapes[name][dim]
        if size % tensor:
            raise StrategyError(
                f"tensor={tensor} does not divide dimension {dim} ({size}) of {key!r}, which tensor_plan splits "
                f"{kind}; degrees that divide it: {divisors(size)}. Choose one of those, or leave {layer!r} out "
                "of the plan."
            )
        out[name] = dim
    return out


def divisors(n: int, limit: int = 64) -> list[int]:
    return [d for d in range(2, min(n, limit) + 1) if n % d == 0]


# ---- Paddle's own annotations ----------------------------------------------------------------------
# NOTE: mesh axes by Paddle's usual names for data and pipeline parallelism; any other axis is the tensor's.
_NOT_TENSOR = frozenset({"dp", "data", "pp", "pipe", "pipeline", "sharding", "sep"})


def _annotated_dims(graph: Graph) -> dict[str, int]:
    """weight -> the dimension dist.shard_tensor split over the mesh's tensor axis (the program's own plan)."""
    out = {}
    for p in graph.params:
        if not p.dims_mapping:
            continue
        axes = [i for i, name in enumerate(p.mesh_axes) if name not in _NOT_TENSOR] or [len(p.mesh_axes) - 1]
        for d, axis in enumerate(p.dims_mapping):
            if axis == axes[0]:
                out[p.name] = d
    return out


def _from_annotations(graph: Graph, keys, dims: Mapping[str, int], shapes, tensor: int) -> TensorPlan:
    bad = [(keys.get(n, n), d, shapes[n][d]) for n, d in dims.items() if shapes[n][d] % tensor]
    if bad:
        key, d, size = bad[0]
        raise StrategyError(
            f"tensor={tensor} does not divide dimension {d} ({size}) of {key!r}, which its "
            f"dist.shard_tensor annotation splits; degrees that divide it: {divisors(size)}."
        )
    layers = {_layer_of(keys.get(n, n))[0]: f"dim {d}" for n, d in dims.items()}
    return TensorPlan(dict(dims), layers, "annotations")


# ---- attention heads ---------------------------------------------------------------------------
def _check_heads(graph: Graph, keys: Mapping[str, str], layers: Mapping[str, str], tensor: int) -> None:
    """A colwise projection reshaped into [..., heads, head_dim] must split whole heads."""
    flow = DataFlow(graph)
    consts = {op.outputs[0]: op.attrs.get("value") for op in flow.ops if op.name == "pd_op.full_int_array"}
    for i, op in enumerate(flow.ops):
        name = flow.param_of.get(op.inputs[1]) if op.name == "pd_op.matmul" else None
        if name is None or layers.get(_layer_of(keys.get(name, ""))[0]) != "colwise":
            continue
        for j in _downstream(flow, i, through=("pd_op.add", "pd_op.add_")):
            op = flow.ops[j]
            target = consts.get(op.inputs[1]) if op.name == "pd_op.reshape" and len(op.inputs) > 1 else None
            if target and len(target) >= 2 and target[-2] > 0 and target[-2] % tensor:
                layer = _layer_of(keys[name])[0]
                raise StrategyError(
                    f"{layer!r} (colwise) is reshaped into {target[-2]} attention heads, which tensor={tensor} "
                    f"does not split evenly; degrees that divide the heads: {divisors(target[-2])}."
                )


def _downstream(flow: DataFlow, i: int, through: tuple[str, ...]) -> list[int]:
    """Ops reading op i's output 0 directly, or through the ops named in `through`."""
    out, todo = [], deque([flow.ops[i].outputs[0]])
    while todo:
        v = todo.popleft()
        for j in flow.readers.get(v, []):
            out.append(j)
            if flow.ops[j].name in through:
                todo.append(flow.ops[j].outputs[0])
    return out


# ---- "auto" ------------------------------------------------------------------------------------
def _auto_layers(graph: Graph, keys: Mapping[str, str], shapes, tensor: int) -> dict[str, str]:
    """Pairs of weight matmuls (colwise feeding rowwise through activations and attention), and
    embeddings split over their vocab, where `tensor` divides the dimensions."""
    flow = DataFlow(graph)
    weight_of = {
        i: flow.param_of[op.inputs[1]]
        for i, op in enumerate(flow.ops)
        if op.name == "pd_op.matmul"
        and op.inputs[1] in flow.param_of
        and len(shapes[flow.param_of[op.inputs[1]]]) == 2
        and not op.attrs.get("transpose_y")
        and not op.attrs.get("transpose_x")
    }
    layers: dict[str, str] = {}
    for i, w in weight_of.items():
        feeders = _feeding_matmuls(flow, i, weight_of)
        if not feeders:
            continue
        col = [weight_of[j] for j in feeders]
        if shapes[w][0] % tensor or any(shapes[c][1] % tensor for c in col):
            continue
        names = [_layer_of(keys[n])[0] for n in (w, *col) if n in keys]
        if len(names) != len(col) + 1 or any(
            layers.get(n, k) != k for n, k in zip(names, ["rowwise"] + ["colwise"] * len(col))
        ):
            continue
        layers[names[0]] = "rowwise"
        layers.update({n: "colwise" for n in names[1:]})
    # NOTE: the word embedding, the largest table: position and type tables are too small to pay.
    tables = [
        flow.param_of[op.inputs[1]]
        for op in flow.ops
        if op.name == "pd_op.embedding" and op.inputs[1] in flow.param_of and flow.param_of[op.inputs[1]] in keys
    ]
    if tables:
        word = max(tables, key=lambda n: shapes[n][0])
        if shapes[word][0] % tensor == 0:
            layers.setdefault(_layer_of(keys[word])[0], "vocab")
    return layers


def _feeding_matmuls(flow: DataFlow, i: int, weight_of: Mapping[int, str]) -> list[int]:
    """The weight matmuls whose outputs reach op i's input without crossing a norm, an embedding or
    another weight matmul."""
    found, seen = [], set()
    todo = deque(p for v in flow.ops[i].inputs[:1] if v in flow.producer for p in [flow.producer[v]])
    while todo:
        j = todo.popleft()
        if j in seen:
            continue
        seen.add(j)
        if j in weight_of:
            found.append(j)
            continue
        if flow.ops[j].name in _STOP:
            return []
        if flow.ops[j].name not in _SHAPE_ONLY:
            todo.extend(flow.producers(j))
    return sorted(found)
