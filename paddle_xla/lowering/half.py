"""Half-precision compute for Paddle AMP O1 (bf16 or fp16, float32 master weights): which ops run in
half and which in float32, and the kernels that compute a float32 op in half.

The cast policy is Paddle AMP's level O1, applied op by op while the Graph is interpreted
(interpreter.Interpreter.cast_operands):
- white-list ops (matmul, conv, einsum) run in half: their float32 inputs are cast down; a matmul
  runs as half x half -> float32 (the fast GEMM on CPU; see half_matmul);
- black-list ops (softmax, norms, losses, reductions, exp/log) run in float32: half inputs are cast up;
- every other op runs in the dtype its inputs already have (JAX promotes half + float32 to float32).
The weights stay float32 (the masters); a white-list op casts its own copy, so jax.grad returns
float32 gradients through the cast, and the optimizer state stays float32. Paddle-free."""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import ops as _every_lowering  # noqa: F401  (the queries below read every declaration)
from ..graph import Graph
from ..ops.conv import from_nhwc, to_pixels
from ..ops.registry import ops_where

HALF = {"bf16": jnp.bfloat16, "fp16": jnp.float16}

# NOTE: Paddle's AutoMixedPrecisionLists (paddle.static.amp.fp16_lists) under PIR op names, as each op
# declares them where it is registered (`@lowering(..., amp="white")`; ops_where includes the in-place
# twins an op declares, and ops Paddle lists that have no lowering here, declared with ops.registry.declare).
WHITE = ops_where(amp="white")
BLACK = ops_where(amp="black")


def cast_floats(x: Any, to) -> Any:
    """Cast the traced floating-point arrays in x (a value or a list of values) to `to`."""
    if isinstance(x, (list, tuple)):
        return type(x)(cast_floats(v, to) for v in x)
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != to and x.dtype != jnp.float64:
        return x.astype(to)
    return x


def cast_operands(op_name: str, args, half) -> list:
    """The operands of `op_name` as O1 hands them to it: half for white-list ops, float32 for black-list ones."""
    if op_name in WHITE:
        return [cast_floats(a, half) for a in args]
    if op_name in BLACK:
        return [cast_floats(a, jnp.float32) for a in args]
    return args


def is_float(x) -> bool:
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
def half_matmul(x, y, *, half=jnp.bfloat16, transpose_x=False, transpose_y=False, cpu=False):
    """Paddle's matmul of float32 operands, computed as half x half -> float32 (`cpu`: in the forms
    XLA:CPU runs fastest)."""
    dtypes = (np.dtype(half), np.dtype(x.dtype), np.dtype(y.dtype))
    if y.ndim == 2 and x.ndim >= 2 and not transpose_x:
        return _weight_mm(x, y, (transpose_y, *dtypes))
    if x.ndim > 2 and x.shape[:-2] == y.shape[:-2]:
        return _batched_mm(x, y, (transpose_x, transpose_y, *dtypes, bool(cpu)))
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
    return lax.dot_general(
        x.astype(half),
        w.astype(half),
        (((x.ndim - 1,), (1 if transpose_w else 0,)), ((), ())),
        preferred_element_type=jnp.float32,
    )


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
    pair = (ct, x) if transpose_w else (x, ct)  # dw is [N, K] or [K, N]
    dw = lax.dot_general(*pair, ((lead, lead), ((), ())), preferred_element_type=f32)
    return dx.astype(x_dtype), dw.astype(w_dtype)


_weight_mm.defvjp(_weight_mm_fwd, _weight_mm_bwd)


# NOTE: a batched matmul of equal leading shapes (attention's QK^T and PV) and its gradients as einsums
# over the operands as stored, for the same reasons as _weight_mm.
@partial(jax.custom_vjp, nondiff_argnums=(2,))
def _batched_mm(x, y, spec):
    transpose_x, transpose_y, half = spec[:3]
    xs, ys = _batched_specs(transpose_x, transpose_y)
    return _batched_dot(f"{xs},{ys}->...mn", x.astype(half), y.astype(half), cpu=spec[-1])


def _batched_specs(transpose_x, transpose_y):
    return ("...km" if transpose_x else "...mk"), ("...nk" if transpose_y else "...kn")


def _batched_mm_fwd(x, y, spec):
    half = spec[2]
    return _batched_mm(x, y, spec), (x.astype(half), y.astype(half))


def _batched_mm_bwd(spec, res, ct):
    transpose_x, transpose_y, _, x_dtype, y_dtype, _ = spec
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
def _batched_dot(spec: str, a, b, cpu: bool):
    """jnp.einsum(spec, a, b) in float32, `spec` written over '...' batch dimensions."""
    if a.ndim != 4 or b.ndim != 4 or not cpu:
        return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)
    ins, out = spec.split("->")
    sa, sb = (f"b{s[3]}h{s[4]}" for s in ins.split(","))  # '...mk' over [B, M, H, K]
    return jnp.einsum(
        f"{sa},{sb}->bh{out[3:]}", jnp.swapaxes(a, 1, 2), jnp.swapaxes(b, 1, 2), preferred_element_type=jnp.float32
    )


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


def restore(x, dtype: str):
    """A half result back in the dtype the Paddle program declared for it."""
    if isinstance(x, jax.Array) and x.dtype in (jnp.bfloat16, jnp.float16) and dtype in ("float32", ""):
        return x.astype(jnp.float32)
    return x
