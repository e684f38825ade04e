"""The one-stage training step: data parallel over replicas, each layer split over `tensor` devices,
and Paddle's sharding stages over the replicas. One jitted program, `steps_per_call` steps in a scan.

Per step:
- forward and backward run per replica (shard_map, manual over "replica"): its slice of the batch,
  its micro-batches accumulated (data.accumulate), as on one Paddle-IPU replica;
- inside, the "tensor" axis stays automatic: weights carry their tensor_plan splits and GSPMD
  places the collectives (the all-reduce after a rowwise layer, the vocab-parallel lookup);
- the gradients are summed over replicas (all-reduce), or reduce-scattered with sharding >= 2;
- the optimizer step runs outside the shard_map on global arrays, so GSPMD runs each rule on the
  slices a device holds, and a norm (global-norm clipping, Lamb's trust ratio) over whole tensors:
  every rule stays exact on sharded state.

Sharding (Paddle's ShardingStage1/2/3; each weight is split over replicas along its largest
dimension that divides evenly and is not the tensor split; a weight with none stays whole):
  1  the optimizer state is split; updated weights are all-gathered;
  2  also the gradients (reduce-scatter instead of all-reduce);
  3  also the weights themselves, gathered inside the forward and gathered again for the backward
     (FSDP), their gradients reduce-scattered as the gathers' transposes. Paddle-free."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from .. import x64
from ..lowering.lower import interpreter_factory
from ..lowering.policy import LoweringPolicy
from ..train import optim
from ..train.precision import scaler_update
from ..train.step import STEP_COMPILER_OPTIONS
from . import ring_rewrite, update
from .context import Context, all_gather, axis_index, group_keys, pmean, psum, psum_scatter, scan
from .data import GATHERED, accumulate
from .engine import EngineBase, sequence_split
from .mesh import put as mesh_put
from .pack import Natural
from .program import whole
from .sequence_interpreter import merged_rows_stay_split
from .state import PackedView
from .tensor_plan import TensorPlan


@x64.methods
class ShardedEngine(EngineBase):
    def __init__(self, graph, config, strategy, placement=None, tensor_plan: TensorPlan | None = None):
        self.tensor_plan = tensor_plan
        super().__init__(graph, config, strategy, placement)

    # ---- where each value lives -----------------------------------------------------------------
    def _layouts(self, R: int):
        st = self.strategy
        shapes = {p.name: tuple(p.shape) for p in self.graph.params}
        tdims = dict(self.tensor_plan.dims) if self.tensor_plan is not None else {}
        self.tdim = {n: tdims.get(n) for n in shapes}
        self.rdim = {n: _replica_dim(shapes[n], self.tdim[n], R) if st.sharding else None for n in shapes}
        self.trainable = tuple(p.name for p in self.graph.trainable())
        self.buffer_names = tuple(p.name for p in self.graph.buffers())
        sds = {n: jax.ShapeDtypeStruct(shapes[n], p.dtype) for p in self.graph.params for n in [p.name]}
        self.opt_tpl = jax.eval_shape(
            lambda ps: optim.init_state(self.config, ps), {n: sds[n] for n in self.config.trainable()}
        )
        self.param_layouts = (Natural(self.trainable),)
        self.buffer_layouts = (Natural(self.buffer_names),)
        self.opt_layouts = (Natural(tuple(self.opt_tpl)),)
        self.packed = {"P": False, "B": False, "O": False}
        self.widths: dict[str, dict] = {"params": {}, "buffers": {}, "opt": {}}
        s3 = st.sharding >= 3
        self.shard_P = {n: self._sharding(shapes[n], n, replica=s3) for n in self.trainable}
        self.shard_B = {n: self._sharding(shapes[n], n, replica=False) for n in self.buffer_names}
        self.shard_O = {
            n: {
                acc: self._sharding(shapes[n], n, replica=st.sharding >= 1)
                if tuple(leaf.shape) == shapes[n]
                else self._sharding((), n, replica=False)
                for acc, leaf in accs.items()
            }
            for n, accs in self.opt_tpl.items()
        }

    def _sharding(self, shape, name: str, replica: bool) -> NamedSharding:
        spec = [None] * len(shape)
        if shape and self.tdim[name] is not None:
            spec[self.tdim[name]] = "tensor"
        if shape and replica and self.rdim[name] is not None:
            spec[self.rdim[name]] = "replica"
        return NamedSharding(self.mesh, P(*spec))

    def _manual(self, name: str, replica: bool) -> P:
        """The spec over the manual axis (replica) alone, as shard_map takes it."""
        d = self.rdim[name] if replica else None
        return P(*([None] * d + ["replica"])) if d is not None else P()

    def place(self, params: Mapping, buffers: Mapping, opt_state: Mapping):
        if all(isinstance(t, PackedView) and t.owner is self for t in (params, buffers, opt_state)):
            return params.arrays, buffers.arrays, opt_state.arrays
        put = lambda tree, where: jax.tree.map(lambda x, w: mesh_put(np.asarray(x), w), tree, where)  # noqa: E731
        return (
            put({n: params[n] for n in self.trainable}, self.shard_P),
            put({n: buffers[n] for n in self.buffer_names}, self.shard_B),
            put({n: dict(opt_state[n]) for n in self.opt_tpl}, self.shard_O),
        )

    def views(self, P_, B, O):
        return (
            PackedView(P_, self.param_layouts, {}, self),
            PackedView(B, self.buffer_layouts, {}, self),
            PackedView(O, self.opt_layouts, {}, self),
        )

    # ---- compiling ----------------------------------------------------------------------------------
    def _context(self, feeds: Mapping[str, np.ndarray]) -> tuple[Context, tuple]:
        st = self.strategy
        graph = self._attention_graph()
        interp = interpreter_factory(graph, LoweringPolicy.live(st.precision))
        weight = 1.0 / st.groups if self.reduction == "mean" else 1.0
        ctx = Context(
            graph=graph,
            subs=(whole(graph),),
            params=self.param_layouts,
            buffers=self.buffer_layouts,
            opt=self.opt_layouts,
            widths={**self.widths, "box": {}},
            sends=(),
            replicas=st.replicas,
            stages=1,
            micro_batches=st.micro_batches,
            loss_weight=weight,
            interpreter=interp,
            recompute=st.recompute,
        )
        if st.sharding >= 3:
            ctx = replace(ctx, weights_in=self._gather(ctx))
        if st.sequence > 1:
            names = sequence_split(feeds, st.sequence, first_dim=2)
            lengths = frozenset(np.shape(feeds[n])[2] for n in names)
            ctx = replace(
                ctx,
                feeds_in=self._split_sequence(names),
                interpreter=merged_rows_stay_split(interp, self.mesh, lengths, st.sequence),
            )
        return ctx, ()

    def _attention_graph(self):
        """Under Strategy(sequence=N) with sequence_attention="ring", the graph with its attention as a ring
        over the sequence devices (ring_rewrite.py); otherwise the graph as captured."""
        st = self.strategy
        if st.sequence == 1 or st.sequence_attention != "ring":
            return self.graph
        return ring_rewrite.rewrite(self.graph, axis="sequence", size=st.sequence, mesh=self.mesh)

    def _split_sequence(self, names: frozenset):
        """Context parallelism: the named feeds' dimension 1 (the sequence) split over the "sequence" axis.
        GSPMD carries the split through every op that keeps the sequence dimension, so each device holds
        1/sequence of the activations. Attention goes round a ring (_attention_graph), or, with
        sequence_attention="gather", GSPMD gathers its keys and values (scores [sequence / N, sequence] per
        device). Values are those of one device (a layout, not a change)."""
        split = NamedSharding(self.mesh, P(None, "sequence"))

        def feeds_in(feeds):
            return {n: jax.lax.with_sharding_constraint(x, split) if n in names else x for n, x in feeds.items()}

        return feeds_in

    def _gather(self, ctx: Context):
        def weights_in(P_):
            out = {}
            for n, x in P_.items():
                if self.rdim[n] is not None:
                    x = checkpoint_name(all_gather(ctx, x, "replica", self.rdim[n]), GATHERED)
                out[n] = self._keep_tensor_split(n, x)
            return out

        return weights_in

    def _keep_tensor_split(self, name: str, x):
        if self.tdim[name] is None or self.strategy.tensor == 1:
            return x
        spec = [None] * x.ndim
        spec[self.tdim[name]] = "tensor"
        return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, P(*spec)))

    def _fwd_bwd(self, ctx: Context):
        """(P, B, feeds, key, scale) -> (loss, grads, fetches, buffers): every replica's micro-batches,
        the gradients reduced over replicas as the sharding stage asks."""
        st = self.strategy
        M = st.micro_batches
        s2, s3 = st.sharding >= 2, st.sharding >= 3

        def per_replica(P_, B, feeds, key, scale):
            feeds = {n: x.reshape((M, x.shape[0] // M) + x.shape[1:]) for n, x in feeds.items()}
            keys = group_keys(key, axis_index(ctx, "replica"), M, st.groups)
            loss, (grads, _), fetches, newB = accumulate(ctx, P_, {}, B, feeds, keys, scale)
            out = {}
            for n, g in grads.items():
                d = self.rdim[n]
                if d is not None and s3:
                    out[n] = g  # NOTE: already reduce-scattered (the gather's transpose)
                elif d is not None and s2:
                    out[n] = psum_scatter(ctx, g, "replica", d)
                else:
                    out[n] = psum(ctx, g, "replica")
            newB = {
                n: pmean(ctx, x, "replica") if jnp.issubdtype(x.dtype, jnp.floating) else x for n, x in newB.items()
            }
            return psum(ctx, loss, "replica"), out, fetches, newB

        if st.replicas == 1:
            return per_replica
        in_specs = ({n: self._manual(n, s3) for n in self.trainable}, P(), P("replica"), P(), P())
        out_specs = (P(), {n: self._manual(n, s2) for n in self.trainable}, P("replica"), P())
        # NOTE: manual over "replica" only: the tensor axis stays automatic inside (GSPMD), and
        # check_vma=False because gradients are summed with explicit collectives, as with pmap.
        return jax.shard_map(
            per_replica, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs, axis_names={"replica"}, check_vma=False
        )

    def _body(self, ctx: Context, templates):
        cfg = self.scaler_cfg
        stop_on_nan = cfg is None
        fwd_bwd = self._fwd_bwd(ctx)
        keep = lambda tree, where: jax.tree.map(jax.lax.with_sharding_constraint, tree, where)  # noqa: E731

        def one(carry, xs):
            P_, B, O, scaler, stopped = carry
            feeds, key, lr = xs
            scale = scaler["scale"]
            loss, grads, fetches, newB = fwd_bwd(P_, B, feeds, key, scale)
            inv = 1.0 / scale
            grads = jax.tree.map(lambda g: g * inv.astype(g.dtype), grads)
            ok = jnp.isfinite(loss) & update.finite(grads)
            go = ok & ~stopped
            # NOTE: on global arrays: GSPMD updates each device's slices and sums norms over them.
            nP, nO = optim.apply(self.config, P_, grads, O, lr, go)
            nP, nO = keep(nP, self.shard_P), keep({n: nO[n] for n in O}, self.shard_O)
            P_, B, O = update.select(go, (nP, newB, nO), (P_, B, O))
            scaler = update.select(stopped, scaler, scaler_update(cfg, scaler, ok))
            stopped = stopped | (~ok & stop_on_nan)
            return (P_, B, O, scaler, stopped), (loss, go, fetches)

        def body(P_, B, O, scaler, feeds, keys, lrs):
            keys = jax.random.wrap_key_data(keys)
            carry, (losses, oks, fetches) = scan(one, (P_, B, O, scaler, jnp.bool_(False)), (feeds, keys, lrs))
            P_, B, O, scaler, _ = carry
            last = jax.tree.map(lambda x: x[-1], fetches)
            return keep(P_, self.shard_P), keep(B, self.shard_B), keep(O, self.shard_O), scaler, losses, oks, last

        return jax.jit(body, donate_argnums=(0, 1, 2), compiler_options=STEP_COMPILER_OPTIONS)

    # ---- reporting ------------------------------------------------------------------------------
    def param_bytes_per_device(self) -> dict[str, int]:
        """Bytes each device holds between steps for weights, buffers and optimizer state."""

        def local(x, sh: NamedSharding) -> int:
            return int(np.prod(sh.shard_shape(tuple(x.shape)))) * np.dtype(x.dtype).itemsize

        sds = {p.name: jax.ShapeDtypeStruct(tuple(p.shape), p.dtype) for p in self.graph.params}
        return {
            "params": sum(local(sds[n], self.shard_P[n]) for n in self.trainable),
            "buffers": sum(local(sds[n], self.shard_B[n]) for n in self.buffer_names),
            "optimizer": sum(
                local(leaf, self.shard_O[n][acc]) for n, accs in self.opt_tpl.items() for acc, leaf in accs.items()
            ),
        }


def _replica_dim(shape: tuple, tdim: int | None, replicas: int) -> int | None:
    """The largest dimension that `replicas` divides, other than the tensor split (None: none does)."""
    fits = [(size, -d) for d, size in enumerate(shape) if d != tdim and size % replicas == 0 and size >= replicas]
    return -max(fits)[1] if fits else None
