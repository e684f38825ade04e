"""The pipelined training step: one jitted SPMD program over the ("replica", "stage", "tensor") mesh
(manual over replicas and stages; GSPMD splits each stage's layers over "tensor") that runs
`steps_per_call` optimizer steps in a lax.scan. One stage runs on sharded.py's engine instead;
EngineBase holds what both share.

Per step and device: forward/backward over the replica's micro-batches in the Strategy's pipeline
schedule, one all-reduce of the gradients over replicas, loss unscaling and the finite check, then
the optimizer on the device's stage (update.apply). Weights, buffers and optimizer state stay packed
and sharded on the devices between calls (state.PackedView shows them to the host). Paddle-free."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from .. import x64
from ..errors import StrategyError
from ..graph import Graph
from ..lowering.lower import interpreter_factory
from ..lowering.policy import LoweringPolicy
from ..strategy import Strategy
from ..train import optim
from ..train.precision import ScalerConfig, scaler_init, scaler_update
from ..train.reduction import loss_reduction
from ..train.step import STEP_COMPILER_OPTIONS
from . import pipeline, pipeline_1f1b, profile, update
from . import stages as stages_lib
from .context import Context, axis_index, group_keys, pmean, pmin, psum, scan
from .mesh import make_mesh, sharding, to_host
from .mesh import put as mesh_put
from .pack import SPLIT, Packing, dtype_of, split_dim, stack, tensor_spec, widths
from .placement import Placement
from .state import PackedView
from .tensor_interpreter import whole_before_split


def reduction_for(graph: Graph, strategy: Strategy) -> str:
    """How micro-batch and replica losses combine: the Strategy's say, else the program's own reduction.
    With one group nothing combines, so an unreadable loss matters only when the batch is split."""
    if strategy.loss_reduction != "auto":
        return strategy.loss_reduction
    found, stopped = loss_reduction(graph)
    if found is not None or strategy.groups == 1:
        return found or "mean"
    where = f"{stopped.name} at {stopped.source or '(no user source line)'}" if stopped is not None else "its inputs"
    raise StrategyError(
        f"This Strategy splits each batch into {strategy.groups} groups (replicas x micro_batches), and paddle_xla "
        f"cannot tell whether the loss is a mean or a sum over the batch: reading it back from the output, it "
        f"stops at {where}. Say which: Strategy(loss_reduction='mean') averages the groups' losses and gradients, "
        "loss_reduction='sum' adds them."
    )


@dataclass(frozen=True)
class PipelineSchedule:
    run: Any  # (ctx, P, Sh, B, feeds, keys, scale, templates) -> gpipe's tuple
    bubble_fraction: Any  # (stages, micro_batches) -> float


# NOTE: Strategy.schedule -> its pipeline; strategy.SCHEDULES lists the same names.
SCHEDULES = {
    "gpipe": PipelineSchedule(pipeline.gpipe, pipeline.bubble_fraction),
    "1f1b": PipelineSchedule(pipeline_1f1b.one_f_one_b, pipeline_1f1b.bubble_fraction),
}


@dataclass
class CallResult:
    params: PackedView
    buffers: PackedView
    opt_state: PackedView
    losses: np.ndarray
    finite: np.ndarray
    fetches: list


@x64.methods
class EngineBase:
    """What both SPMD engines share: the mesh, how group losses combine, the fp16 loss scaler, one
    compiled program per input shape, and the call that runs `steps_per_call` steps."""

    def __init__(
        self, graph: Graph, config: optim.OptimizerConfig, strategy: Strategy, placement: Placement | None = None
    ):
        self.graph, self.config, self.strategy = router_loss_per_group(graph, strategy), config, strategy
        self.placement = placement
        self.mesh = make_mesh(strategy)
        self.reduction = reduction_for(graph, strategy)
        ls = strategy.loss_scale
        self.scaler_cfg = (
            ScalerConfig(ls.init, ls.growth_factor, ls.backoff_factor, ls.growth_interval, ls.dynamic)
            if ls is not None
            else None
        )
        self.scaler = {k: mesh_put(v, sharding(self.mesh)) for k, v in scaler_init(self.scaler_cfg).items()}
        self._layouts(strategy.replicas)
        self._compiled: dict[tuple, Any] = {}
        self.stage_info: dict[tuple, stages_lib.Stages] = {}

    def _layouts(self, R: int):
        raise NotImplementedError

    def compiled(self, feeds: Mapping[str, np.ndarray]):
        sig = _signature(feeds)
        fn = self._compiled.get(sig)
        if fn is None:
            ctx, templates = self._context(feeds)
            fn = self._compiled[sig] = self._body(ctx, templates)
        return fn

    def __call__(self, params, buffers, opt_state, feeds: Mapping[str, np.ndarray], keys, lrs) -> CallResult:
        """feeds: name -> [K, batch, ...]; keys: [K] PRNG keys; lrs: [K] learning rates."""
        for x in feeds.values():
            self.strategy.check_batch(x.shape[1])
        fn = self.compiled(feeds)
        state = self.place(params, buffers, opt_state)
        feeds = {n: mesh_put(x, self._feed_sharding(n, x)) for n, x in feeds.items()}
        keys = mesh_put(jax.random.key_data(keys), sharding(self.mesh))
        lrs = mesh_put(np.asarray(lrs, np.float32), sharding(self.mesh))
        *state, self.scaler, losses, oks, fetches = fn(*state, self.scaler, feeds, keys, lrs)
        views = self.views(*state)
        micro = next(iter(feeds.values())).shape[1] // self.strategy.groups
        return CallResult(*views, to_host(losses), to_host(oks), [_unstack(to_host(f), micro) for f in fetches])

    def _feed_sharding(self, name: str, x: np.ndarray):
        """[steps, batch, ...] split over replicas; with sequence > 1, the sequence (dimension 2) too when
        it divides, so no device ever holds a whole sequence."""
        if splits_sequence(x, self.strategy.sequence, dim=2):
            return sharding(self.mesh, None, "replica", "sequence")
        return sharding(self.mesh, None, "replica")

    @property
    def loss_scale(self) -> float | None:
        return float(to_host(self.scaler["scale"])) if self.scaler_cfg is not None else None

    @property
    def skipped_steps(self) -> int:
        return int(to_host(self.scaler["skipped"]))

    def scaler_state(self) -> dict[str, float | int]:
        """The loss scaler as plain numbers (for checkpoints): scale, clean steps in a row, skipped steps."""
        return {k: to_host(v).item() for k, v in self.scaler.items()}

    def set_scaler_state(self, state: Mapping[str, float | int]) -> None:
        """Restore what scaler_state returned; every field keeps its dtype and placement."""
        self.scaler = {
            k: mesh_put(np.asarray(state[k], dtype=np.asarray(to_host(v)).dtype), sharding(self.mesh))
            for k, v in self.scaler.items()
        }

    def bubble_fraction(self) -> float:
        return SCHEDULES[self.strategy.schedule].bubble_fraction(self.strategy.stages, self.strategy.micro_batches)


@x64.methods
class Engine(EngineBase):
    """Pipelines: stages > 1, each stage's weights, buffers and optimizer state packed per dtype."""

    def __init__(
        self,
        graph: Graph,
        config: optim.OptimizerConfig,
        strategy: Strategy,
        placement: Placement | None = None,
        tensor_plan=None,
    ):
        self.own = stages_lib.ownership(graph, placement)
        self.configs = update.stage_configs(config, self.own.trainable, self.own.shared)
        self.zero = strategy.shard_optimizer_state
        self.tensor_plan = tensor_plan
        # NOTE: with tensor > 1 the tensor axis stays automatic inside the shard_map (GSPMD places its
        # collectives); each split weight is packed as its slices (pack.py), sharded over "tensor".
        self.tdim = dict(tensor_plan.dims) if tensor_plan is not None and strategy.tensor > 1 else {}
        super().__init__(graph, config, strategy, placement)

    # ---- packing ------------------------------------------------------------------------------
    def _layouts(self, R: int):
        shapes = {p.name: jax.ShapeDtypeStruct(tuple(p.shape), p.dtype) for p in self.graph.params}
        opt_tpl = jax.eval_shape(
            lambda ps: optim.init_state(self.config, ps), {n: shapes[n] for n in self.config.trainable()}
        )
        opt_names = [tuple(n for n in names if n in opt_tpl) for names in self.own.trainable]
        T = self.strategy.tensor
        split = dict(split_dims=self.tdim, tensor=T, constrain=self._constrain) if self.tdim else {}
        self.param_layouts = tuple(Packing.of({n: shapes[n] for n in names}, **split) for names in self.own.trainable)
        self.buffer_layouts = tuple(Packing.of({n: shapes[n] for n in names}) for names in self.own.buffers)
        self.opt_layouts = tuple(Packing.of({n: opt_tpl[n] for n in names}, **split) for names in opt_names)
        self.opt_shared = tuple(n for n in self.own.shared if n in opt_tpl)
        self.widths = {
            "params": widths(self.param_layouts),
            "buffers": widths(self.buffer_layouts),
            "opt": widths(self.opt_layouts, R if self.zero else 1),
        }
        self.shared_specs = {n: self._tensor_spec(n, shapes[n].shape) for n in self.own.shared}
        self.opt_shared_specs = {
            n: {acc: self._tensor_spec(n, leaf.shape) for acc, leaf in opt_tpl[n].items()} for n in self.opt_shared
        }

    def _tensor_spec(self, name: str, shape: tuple) -> P:
        """A whole (unpacked) weight's spec: "tensor" on its split dimension, if the plan splits it."""
        d = split_dim(shape, self.tdim.get(name), self.strategy.tensor)
        return P() if d is None else P(*tensor_spec(len(shape), d))

    def _constrain(self, x, spec: tuple):
        return jax.lax.with_sharding_constraint(x, jax.sharding.NamedSharding(self.mesh, P(*spec)))

    def _spec(self, kind: str, key: str, manual_only: bool = False) -> P:
        """Where a packed array lives: stage rows; a split key's slices over "tensor"; ZeRO's state over
        "replica" along its last dimension. `manual_only`: the shard_map spec (manual axes alone)."""
        tensor = key.endswith(SPLIT)
        spec = ["stage"] + ([None if manual_only else "tensor"] if tensor else [])
        if kind == "O" and self.zero:
            spec.append("replica")
        return P(*spec)

    def place(self, params: Mapping, buffers: Mapping, opt_state: Mapping):
        """Device arrays (P, Sh, B, O, Osh) from a state: as they are when this engine packed them."""
        if all(isinstance(t, PackedView) and t.owner is self for t in (params, buffers, opt_state)):
            return params.arrays, params.extra, buffers.arrays, opt_state.arrays, opt_state.extra
        at = lambda spec: jax.sharding.NamedSharding(self.mesh, spec)  # noqa: E731
        own = self.own
        opt_names = [lay.names() for lay in self.opt_layouts]

        def arrange(kind, layouts, tree, names):
            width = self.widths[{"P": "params", "B": "buffers", "O": "opt"}[kind]]
            packed = stack(layouts, [_pick(tree, n) for n in names], width)
            return {key: mesh_put(x, at(self._spec(kind, key))) for key, x in packed.items()}

        shared = {n: mesh_put(x, at(self.shared_specs[n])) for n, x in _pick(params, own.shared).items()}
        opt_shared = {
            n: {acc: mesh_put(x, at(self.opt_shared_specs[n][acc])) for acc, x in accs.items()}
            for n, accs in _pick(opt_state, self.opt_shared).items()
        }
        return (
            arrange("P", self.param_layouts, params, own.trainable),
            shared,
            arrange("B", self.buffer_layouts, buffers, own.buffers),
            arrange("O", self.opt_layouts, opt_state, opt_names),
            opt_shared,
        )

    def views(self, P_, Sh, B, O, Osh):
        return (
            PackedView(P_, self.param_layouts, Sh, self),
            PackedView(B, self.buffer_layouts, {}, self),
            PackedView(O, self.opt_layouts, Osh, self),
        )

    # ---- compiling --------------------------------------------------------------------------------
    def _context(self, feeds: Mapping[str, np.ndarray]) -> tuple[Context, tuple]:
        st = self.strategy
        # NOTE: channels-last stays off: a stage's outputs must keep the layout the program declares.
        policy = replace(LoweringPolicy.live(st.precision), channels_last=False)
        interp = interpreter_factory(self.graph, policy)
        if self.tdim:
            interp = whole_before_split(interp, self.mesh)
        weight = 1.0 / st.groups if self.reduction == "mean" else 1.0
        micro = {n: jax.ShapeDtypeStruct((x.shape[1] // st.groups,) + x.shape[2:], x.dtype) for n, x in feeds.items()}
        shapes = {p.name: jax.ShapeDtypeStruct(tuple(p.shape), p.dtype) for p in self.graph.params}
        values = profile.trace_values(self.graph, shapes, micro, interp)
        info = stages_lib.build(self.graph, self.placement, values)
        self.stage_info[_signature(feeds)] = info
        templates = tuple(_template(values[f.value]) for f in self.graph.fetches[1:])
        ctx = Context(
            graph=self.graph,
            subs=info.subs,
            params=self.param_layouts,
            buffers=self.buffer_layouts,
            opt=self.opt_layouts,
            widths={**self.widths, "box": dict(info.box)},
            sends=info.sends,
            replicas=st.replicas,
            stages=st.stages,
            micro_batches=st.micro_batches,
            loss_weight=weight,
            interpreter=interp,
            recompute=st.recompute,
        )
        return ctx, templates

    def _body(self, ctx: Context, templates):
        st, cfg = self.strategy, self.scaler_cfg
        M, zero = st.micro_batches, self.zero
        stop_on_nan = cfg is None
        schedule = SCHEDULES[st.schedule].run

        def one(carry, xs):
            P_, Sh, B, O, Osh, scaler, stopped = carry
            feeds, key, lr = xs
            feeds = {n: x.reshape((M, x.shape[0] // M) + x.shape[1:]) for n, x in feeds.items()}
            keys = group_keys(key, axis_index(ctx, "replica"), M, st.groups)
            scale = scaler["scale"]
            loss, (gP, gSh), fetches, newB = schedule(ctx, P_, Sh, B, feeds, keys, scale, templates)
            gP = psum(ctx, gP, "replica")
            gSh = psum(ctx, gSh, ("replica", "stage"))
            loss = psum(ctx, loss, ("replica", "stage"))
            newB = {
                dt: pmean(ctx, x, "replica") if jnp.issubdtype(x.dtype, jnp.floating) else x for dt, x in newB.items()
            }
            inv = 1.0 / scale
            gP, gSh = jax.tree.map(lambda g: g * inv.astype(g.dtype), (gP, gSh))
            ok = jnp.isfinite(loss) & update.finite(gP, gSh)
            ok = pmin(ctx, ok.astype(jnp.int32), ("replica", "stage")) > 0
            go = ok & ~stopped
            nP, nSh, nO, nOsh = update.apply(
                ctx, self.config, self.configs, self.own.shared, P_, Sh, O, Osh, gP, gSh, lr, zero, go
            )
            new = update.select(go, (nP, nSh, newB, nO, nOsh), (P_, Sh, B, O, Osh))
            scaler = update.select(stopped, scaler, scaler_update(cfg, scaler, ok))
            stopped = stopped | (~ok & stop_on_nan)
            return (*new, scaler, stopped), (loss, go, fetches)

        row = lambda t: {dt: x[0] for dt, x in t.items()}  # noqa: E731
        lift = lambda t: {dt: x[None] for dt, x in t.items()}  # noqa: E731

        def body(P_, Sh, B, O, Osh, scaler, feeds, keys, lrs):
            keys = jax.random.wrap_key_data(keys)
            init = (row(P_), Sh, row(B), row(O), Osh, scaler, jnp.bool_(False))
            carry, (losses, oks, fetches) = scan(one, init, (feeds, keys, lrs))
            P2, Sh2, B2, O2, Osh2, scaler, _ = carry
            last = jax.tree.map(lambda x: x[-1], fetches)
            return lift(P2), Sh2, lift(B2), lift(O2), Osh2, scaler, losses, oks, last

        O_spec = {key: self._spec("O", key, manual_only=True) for key in self.widths["opt"]}
        state = (P("stage"), P(), P("stage"), O_spec, P())
        in_specs = (*state, P(), P(None, "replica"), P(), P())
        out_specs = (*state, P(), P(), P(), P("replica"))
        # NOTE: check_vma=False: gradients are taken inside the per-device function and summed with
        # explicit psums, as with pmap, so no implicit cross-device sums must be added. With a tensor
        # axis, only replicas and stages are manual: GSPMD splits each layer over "tensor" inside.
        manual = {"axis_names": {"replica", "stage"}} if self.strategy.tensor > 1 else {}
        mapped = jax.shard_map(body, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False, **manual)
        # NOTE: XLA's CPU pipeline drops optimization barriers early (cse_barrier_expander): CSE would
        # merge jax.checkpoint's recomputation back into the forward pass (no memory saved), and the
        # optimizer's in-place moments (optim._select_early) would cost copies. The pass stays off.
        return jax.jit(mapped, donate_argnums=(0, 1, 2, 3, 4), compiler_options=STEP_COMPILER_OPTIONS)

    # ---- reporting ------------------------------------------------------------------------------
    def param_bytes_per_device(self) -> dict[str, int]:
        """Bytes each device holds for weights, buffers and optimizer state (packed widths)."""
        nbytes = lambda w: sum(n * np.dtype(dtype_of(dt)).itemsize for dt, n in w.items())  # noqa: E731
        size = {p.name: int(np.prod(p.shape)) * np.dtype(p.dtype).itemsize for p in self.graph.params}
        shared = sum(size[n] // (self.strategy.tensor if self.shared_specs[n] != P() else 1) for n in self.own.shared)
        return {
            "params": nbytes(self.widths["params"]) + shared,
            "buffers": nbytes(self.widths["buffers"]),
            "optimizer": nbytes(self.widths["opt"]) // (self.strategy.replicas if self.zero else 1),
        }


def _pick(tree: Mapping, names) -> dict:
    """{name: value} for these names, as NumPy (a value may be a dict of accumulators)."""
    return {n: jax.tree.map(np.asarray, tree[n]) for n in names}


def _signature(feeds: Mapping[str, np.ndarray]) -> tuple:
    return tuple((n, tuple(x.shape), str(x.dtype)) for n, x in sorted(feeds.items()))


def _template(info):
    if info.is_static:
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype), info.static)
    return jax.tree.unflatten(info.tree, list(info.leaves))


def _unstack(x, micro: int) -> np.ndarray:
    """[groups, micro-batch, ...] back to [batch, ...]; other fetches stay one row per group."""
    x = np.asarray(x)
    return x.reshape((-1,) + x.shape[2:]) if x.ndim >= 2 and x.shape[1] == micro else x


def splits_sequence(x: np.ndarray, sequence: int, dim: int) -> bool:
    """Whether Strategy(sequence=N) splits this feed: it has a sequence dimension (dimension 1 of a sample
    batch, `dim` here with leading step dimensions) that N divides."""
    return sequence > 1 and x.ndim > dim and x.shape[dim] % sequence == 0


def sequence_split(feeds: Mapping[str, np.ndarray], sequence: int, first_dim: int) -> frozenset:
    """The feeds that splits_sequence splits; none is a StrategyError naming the shapes."""
    names = frozenset(n for n, x in feeds.items() if splits_sequence(x, sequence, first_dim))
    if not names:
        shapes = {n: tuple(x.shape[first_dim - 1 :]) for n, x in feeds.items()}
        raise StrategyError(
            f"Strategy(sequence={sequence}) splits each input's dimension 1 (the sequence), but no "
            f"input has one that {sequence} divides: {shapes}. Pad the sequence to a multiple of "
            f"{sequence}, or lower sequence."
        )
    return names


def compiled_step(engine: Engine, params, buffers, opt_state, feeds: Mapping[str, np.ndarray]):
    """The XLA executable of one call with these feeds' shapes (not run): its text, its memory analysis."""
    fn = engine.compiled(feeds)
    state = engine.place(params, buffers, opt_state)
    k = next(iter(feeds.values())).shape[0]
    keys = jax.random.key_data(jax.random.split(jax.random.key(0), k))
    feeds = {n: mesh_put(x, engine._feed_sharding(n, x)) for n, x in feeds.items()}
    return fn.lower(*state, engine.scaler, feeds, keys, np.zeros(k, np.float32)).compile()


def memory_analysis(engine: Engine, params, buffers, opt_state, feeds: Mapping[str, np.ndarray]) -> dict:
    """XLA's compiled memory analysis of one call (bytes per device): arguments, outputs, temporaries."""
    m = compiled_step(engine, params, buffers, opt_state, feeds).memory_analysis()
    return {
        "argument_bytes": int(m.argument_size_in_bytes),
        "output_bytes": int(m.output_size_in_bytes),
        "temp_bytes": int(m.temp_size_in_bytes),
        "generated_code_bytes": int(m.generated_code_size_in_bytes),
    }


def router_loss_per_group(graph: Graph, strategy: Strategy) -> Graph:
    """`graph` with each MoE op's router-loss gradient (ops/moe.py's router_loss_grad, FakeMoERouterLoss's
    constant) divided among the step's groups (replicas x micro-batches). The constant reaches every group's
    router loss whatever weight the engine gives that group's loss, and the engine adds the groups' gradients:
    undivided, the router would weigh `groups` times what Paddle gives it, whose trainer averages micro-batches
    and data-parallel ranks alike."""
    groups = strategy.groups
    if not any(op.attrs.get("router_loss_grad") for op in graph.block.ops):
        return graph
    if strategy.sequence > 1:
        # NOTE: each sequence device's op would see a slice of the tokens and inject its own router loss
        raise StrategyError(
            f"Strategy(sequence={strategy.sequence}) splits the tokens of an MoE layer whose router loss trains "
            "(ERNIE 4.5 MoE); paddle_xla does not split that loss over sequence devices yet: use sequence=1"
        )

    def shared(op):
        if not op.attrs.get("router_loss_grad"):
            return op
        return replace(op, attrs={**op.attrs, "router_loss_grad": op.attrs["router_loss_grad"] / groups})

    return replace(graph, block=replace(graph.block, ops=tuple(shared(op) for op in graph.block.ops)))
