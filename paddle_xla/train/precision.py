"""Mixed precision: half-precision compute with float32 master weights, and fp16 loss scaling.

The cast policy is Paddle AMP's level O1, applied op by op while the Graph is interpreted:
- white-list ops (matmul, conv, einsum) run in half: their float32 inputs are cast down; a weight
  matmul runs as half x half -> float32 (the fast GEMM on CPU; see half_matmul);
- black-list ops (softmax, norms, losses, reductions, exp/log) run in float32: half inputs are cast up;
- every other op runs in the dtype its inputs already have (JAX promotes half + float32 to float32).
The weights stay float32 (the masters); a white-list op casts its own copy, so jax.grad returns
float32 gradients through the cast, and the optimizer state stays float32.

Loss scaling follows paddle.amp.GradScaler: the loss is multiplied by `scale` before the backward
pass and the gradients divided by it; a step with a non-finite gradient is skipped and the scale
multiplied by `backoff_factor`; after `growth_interval` clean steps in a row it is multiplied by
`growth_factor`. Paddle-free."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..graph import Graph
from ..lower import Interpreter, check_graph
from ..errors import UnsupportedOpsError
from ..ops.activation import gelu_by_erf
from ..ops.conv import from_nhwc, is_pointwise_conv, to_pixels
from ..ops.util import on_xla_cpu

HALF = {"bf16": jnp.bfloat16, "fp16": jnp.float16}

# NOTE: Paddle's AutoMixedPrecisionLists (paddle.static.amp.fp16_lists) under PIR op names.
WHITE = frozenset(f"pd_op.{n}" for n in (
    "matmul", "conv2d", "depthwise_conv2d", "conv2d_transpose", "conv3d", "einsum", "bmm", "mv", "addmm"))
BLACK = frozenset(f"pd_op.{n}" for n in (
    "softmax", "log_softmax", "cross_entropy_with_softmax", "cross_entropy_with_softmax_", "layer_norm",
    "group_norm", "batch_norm", "batch_norm_", "sync_batch_norm_", "instance_norm", "mean", "sum", "prod",
    "cumsum", "cumprod", "exp", "expm1", "log", "log2", "log10", "log1p", "pow", "square", "rsqrt",
    "reciprocal", "softplus", "logsumexp", "p_norm", "frobenius_norm", "sigmoid_cross_entropy_with_logits",
    "nll_loss", "huber_loss", "margin_cross_entropy", "embedding", "mean_all", "bce_loss", "kldiv_loss"))


def _cast_floats(x: Any, to) -> Any:
    """Cast the traced floating-point arrays in x (a value or a list of values) to `to`."""
    if isinstance(x, (list, tuple)):
        return type(x)(_cast_floats(v, to) for v in x)
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != to \
            and x.dtype != jnp.float64:
        return x.astype(to)
    return x


class MixedInterpreter(Interpreter):
    """The Graph interpreter with Paddle's O1 cast policy applied to each op's inputs."""

    half = jnp.bfloat16

    def apply(self, op, args, env):
        if op.name == "pd_op.matmul" and all(_is_float(a) for a in args):
            # NOTE: every float matmul as a half x half -> float32 dot, gradients included (half_matmul).
            return (half_matmul(*args, half=self.half, **op.attrs),) + (None,) * (len(op.outputs) - 1)
        if op.name == "pd_op.conv2d" and _is_float(args[0]) and on_xla_cpu() \
                and is_pointwise_conv(args[1], **op.attrs):
            # NOTE: ResNet-50 bf16 training step on CPU, in-process A/B: 2.95 -> 1.78 s. Elsewhere the
            # backend's own convolutions (cuDNN, TPU) are the better kernels.
            return (half_pointwise_conv(*args, half=self.half, data_format=op.attrs.get("data_format", "NCHW"),
                                        strides=op.attrs["strides"]),)
        if op.name == "pd_op.gelu" and _is_float(args[0]):
            # NOTE: BERT-Base bf16 inference, in-process A/B: -1.6 % (the FFN's GELU fusion 29 -> 13 ms).
            return (gelu_by_erf(args[0], approximate=bool(op.attrs.get("approximate", False))),)
        return super().apply(op, self.cast_operands(op, args), env)

    def cast_operands(self, op, args):
        if op.name in WHITE:
            return [_cast_floats(a, self.half) for a in args]
        if op.name in BLACK:
            return [_cast_floats(a, jnp.float32) for a in args]
        return args


def _is_float(x) -> bool:
    return isinstance(x, jax.Array) and x.dtype in (jnp.float32, jnp.bfloat16, jnp.float16)


def half_weight_names(graph: Graph) -> set[str]:
    """Float32 parameters that only white-list ops read, so that an inference program can hold them in
    half once instead of casting them on every call (the values the ops see are the same)."""
    dtypes = {p.name: p.dtype for p in graph.params}
    return {n for n in graph.params_read_only_by(lambda op, _: op in WHITE) if dtypes[n] == "float32"}


# ---- matmul: half inputs, float32 accumulation and result -----------------------------------------
# NOTE: on CPU a bf16 x bf16 -> f32 dot runs ~2x the f32 rate, but bf16 -> bf16 does not, and JAX's own
# backward of a mixed dot multiplies a float32 cotangent by a half operand (the slow f32 path). So the
# matmul and both its gradients are written as half x half -> float32 dots.
def half_matmul(x, y, *, half=jnp.bfloat16, transpose_x=False, transpose_y=False):
    """Paddle's matmul of float32 operands, computed as half x half -> float32."""
    dtypes = (np.dtype(half), np.dtype(x.dtype), np.dtype(y.dtype))
    if y.ndim == 2 and x.ndim >= 2 and not transpose_x:
        return _weight_mm(x, y, (transpose_y, *dtypes))
    if x.ndim > 2 and x.shape[:-2] == y.shape[:-2]:
        return _batched_mm(x, y, (transpose_x, transpose_y, *dtypes))
    # NOTE: the rest (vectors, broadcast batch dimensions, transpose_x on a weight) through jnp's rules.
    x2 = x[None, :] if x.ndim == 1 else x
    y2 = y[:, None] if y.ndim == 1 else y
    if transpose_x and x.ndim > 1:
        x2 = jnp.swapaxes(x2, -1, -2)
    if transpose_y and y.ndim > 1:
        y2 = jnp.swapaxes(y2, -1, -2)
    out = _mm(x2.astype(half), y2.astype(half))
    if x.ndim == 1:
        out = out[..., 0, :]
    if y.ndim == 1:
        out = out[..., 0]
    return out


@jax.custom_vjp
def _mm(a, b):
    return jnp.matmul(a, b, preferred_element_type=jnp.float32)


def _mm_fwd(a, b):
    return _mm(a, b), (a, b)


def _mm_bwd(res, ct):
    a, b = res
    ct = ct.astype(a.dtype)
    da = jnp.matmul(ct, jnp.swapaxes(b, -1, -2), preferred_element_type=jnp.float32)
    db = jnp.matmul(jnp.swapaxes(a, -1, -2), ct, preferred_element_type=jnp.float32)
    return _sum_to(da, a.shape).astype(a.dtype), _sum_to(db, b.shape).astype(b.dtype)


_mm.defvjp(_mm_fwd, _mm_bwd)


# NOTE: a weight matmul [..., K] x [K, N] (or [N, K] with transpose_w) and both its gradients as
# dot_generals on the unflattened operands, with no transposes: XLA:CPU's bf16 GEMM measured here at
# ~400 GFLOP/s in these forms, but ~100-190 for `ct @ w.T` or a 2-D `x.T @ ct` (the transposed
# operand takes a slow path), which made the backward pass barely faster than float32's.
# The operands arrive in their own dtypes and are cast to half inside, so the gradients leave as the
# dots' float32 results: casting outside would round every weight and input gradient to half and back
# (two more passes over each, and bf16 gradients; measured: 2 converts per weight per step).
@partial(jax.custom_vjp, nondiff_argnums=(2,))
def _weight_mm(x, w, spec):
    transpose_w, half = spec[0], spec[1]
    return lax.dot_general(x.astype(half), w.astype(half), (((x.ndim - 1,), (1 if transpose_w else 0,)), ((), ())),
                           preferred_element_type=jnp.float32)


def _weight_mm_fwd(x, w, spec):
    half = spec[1]
    return _weight_mm(x, w, spec), (x.astype(half), w.astype(half))


def _weight_mm_bwd(spec, res, ct):
    transpose_w, _, x_dtype, w_dtype = spec
    x, w = res
    ct = ct.astype(x.dtype)
    lead = tuple(range(x.ndim - 1))
    f32 = jnp.float32
    dx = lax.dot_general(ct, w, (((ct.ndim - 1,), (0 if transpose_w else 1,)), ((), ())), preferred_element_type=f32)
    pair = (ct, x) if transpose_w else (x, ct)                       # dw is [N, K] or [K, N]
    dw = lax.dot_general(*pair, ((lead, lead), ((), ())), preferred_element_type=f32)
    return dx.astype(x_dtype), dw.astype(w_dtype)


_weight_mm.defvjp(_weight_mm_fwd, _weight_mm_bwd)


# NOTE: a batched matmul of equal leading shapes (attention's QK^T and PV) and its gradients as einsums
# over the operands as stored, for the same reasons as _weight_mm.
@partial(jax.custom_vjp, nondiff_argnums=(2,))
def _batched_mm(x, y, spec):
    transpose_x, transpose_y, half = spec[:3]
    xs, ys = _batched_specs(transpose_x, transpose_y)
    return _batched_dot(f"{xs},{ys}->...mn", x.astype(half), y.astype(half))


def _batched_specs(transpose_x, transpose_y):
    return ("...km" if transpose_x else "...mk"), ("...nk" if transpose_y else "...kn")


def _batched_mm_fwd(x, y, spec):
    half = spec[2]
    return _batched_mm(x, y, spec), (x.astype(half), y.astype(half))


def _batched_mm_bwd(spec, res, ct):
    transpose_x, transpose_y, _, x_dtype, y_dtype = spec
    x, y = res
    ct = ct.astype(x.dtype)
    xs, ys = _batched_specs(transpose_x, transpose_y)
    dx = jnp.einsum(f"...mn,{ys}->{xs}", ct, y, preferred_element_type=jnp.float32)
    dy = jnp.einsum(f"{xs},...mn->{ys}", x, ct, preferred_element_type=jnp.float32)
    return dx.astype(x_dtype), dy.astype(y_dtype)


# NOTE: attention's operands arrive as [B, S, H, D] -> [B, H, S, D] transposes, and XLA:CPU gives a
# transpose the layout that makes it a bitcast. Its half x half -> float32 batched dot then has operands
# that YNNPACK does not take, so XLA upcasts them and runs the dot in float32. Written over the
# operands with axes 1 and 2 swapped back, the two transposes cancel and XLA's own dot canonicalization
# lays the operands out for the half dot: BERT-Base bf16 inference, in-process A/B, attention fusions
# 37 -> 26 ms, the model 479 -> 470 ms. The same dot in value on any input; elsewhere the backend's
# layouts are left alone. Forward only: the gradients' dots contract over axis 2, and XLA:CPU then folds
# a transpose into a bf16 dot that YNNPACK does not take and its fallback cannot run ("Unsupported
# element type for DotThunk"); they stay as they were (upcast to float32; the training step is unchanged).
def _batched_dot(spec: str, a, b):
    """jnp.einsum(spec, a, b) in float32, `spec` written over '...' batch dimensions."""
    if a.ndim != 4 or b.ndim != 4 or not on_xla_cpu():
        return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)
    ins, out = spec.split("->")
    sa, sb = (f"b{s[3]}h{s[4]}" for s in ins.split(","))        # '...mk' over [B, M, H, K]
    return jnp.einsum(f"{sa},{sb}->bh{out[3:]}", jnp.swapaxes(a, 1, 2), jnp.swapaxes(b, 1, 2),
                      preferred_element_type=jnp.float32)


_batched_mm.defvjp(_batched_mm_fwd, _batched_mm_bwd)


# ---- 1x1 convolutions: a weight matmul over the pixels ----------------------------------------------
# NOTE: XLA:CPU's convolution emitter runs bf16 no faster than float32, while a bf16 GEMM runs ~2x:
# a ResNet-50 1x1 conv (8x256x56x56 -> 64) forward+backward 38 -> 26 ms as _weight_mm over the pixels.
def half_pointwise_conv(x, w, *, half, data_format, strides):
    """A 1x1 convolution (OIHW filter [O, C, 1, 1]) as pixels [N, H, W, C] x [O, C]^T in half."""
    dtypes = (np.dtype(half), np.dtype(x.dtype), np.dtype(w.dtype))
    out = _weight_mm(to_pixels(x, strides, data_format), w[:, :, 0, 0], (True, *dtypes)).astype(half)
    return from_nhwc(out, data_format)


def _sum_to(x, shape):
    """Undo matmul's broadcasting of batch dimensions."""
    lead = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(lead))) if lead else x
    axes = tuple(i for i, (n, m) in enumerate(zip(x.shape, shape)) if m == 1 and n != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


def interpreter_for(precision: str) -> type[Interpreter]:
    """The interpreter class that computes a Graph in `precision`."""
    if precision == "fp32":
        return Interpreter
    return type(f"MixedInterpreter_{precision}", (MixedInterpreter,), {"half": HALF[precision]})


def lower_mixed(graph: Graph, precision: str, interpreter: type[Interpreter] | None = None) -> Callable:
    """Like lower.lower, in `precision` (`interpreter`: a subclass of interpreter_for(precision));
    float outputs are returned in the Graph's own dtypes, buffers (BatchNorm statistics) keep theirs."""
    report = check_graph(graph)
    if not report.ok:
        raise UnsupportedOpsError(report)
    interp = interpreter or interpreter_for(precision)
    dtypes = {p.name: p.dtype for p in graph.params}

    def fn(params: Mapping, buffers: Mapping, feeds: Mapping, key=None):
        key = jax.random.key(0) if key is None else key
        env: dict[int, Any] = {}
        for p in graph.params:
            env[p.value] = params[p.name] if p.name in params else buffers[p.name]
        for f in graph.feeds:
            env[f.value] = feeds[f.name]
        interp(key).run_block(graph.block, env)
        fetches = tuple(_restore(env[f.value], f.dtype) for f in graph.fetches)
        new_buffers = {n: _restore(env[v], dtypes[n]) for n, v in graph.buffer_updates}
        return fetches, new_buffers

    return fn


def _restore(x, dtype: str):
    """A half result back in the dtype the Paddle program declared for it."""
    if isinstance(x, jax.Array) and x.dtype in (jnp.bfloat16, jnp.float16) and dtype in ("float32", ""):
        return x.astype(jnp.float32)
    return x


# ---- dynamic loss scaling -----------------------------------------------------------------------
@dataclass(frozen=True)
class ScalerConfig:
    init: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int
    dynamic: bool = True


def scaler_init(cfg: ScalerConfig | None) -> dict[str, jax.Array]:
    """The loss-scale state: scale, clean steps in a row, steps skipped so far."""
    scale = cfg.init if cfg is not None else 1.0
    return {"scale": jnp.float32(scale), "good": jnp.int32(0), "skipped": jnp.int32(0)}


def scaler_update(cfg: ScalerConfig | None, state: Mapping, finite) -> dict[str, jax.Array]:
    """Paddle's update_loss_scaling with decr_every_n_nan_or_inf=1."""
    if cfg is None:
        return dict(state)
    skipped = state["skipped"] + jnp.where(finite, 0, 1).astype(jnp.int32)
    if not cfg.dynamic:
        return {**state, "skipped": skipped}
    good = jnp.where(finite, state["good"] + 1, 0)
    grow = good >= cfg.growth_interval
    grown = state["scale"] * jnp.float32(cfg.growth_factor)
    # NOTE: as Paddle's kernel: a grown scale that overflows is not taken; a lowered one stays >= 1.
    grown = jnp.where(jnp.isfinite(grown), grown, state["scale"])
    lowered = jnp.maximum(state["scale"] * jnp.float32(cfg.backoff_factor), jnp.float32(1.0))
    scale = jnp.where(finite, jnp.where(grow, grown, state["scale"]), lowered)
    return {"scale": scale, "good": jnp.where(grow, 0, good).astype(jnp.int32), "skipped": skipped}
