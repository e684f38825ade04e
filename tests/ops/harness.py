"""Table-driven op parity: run one Paddle call eagerly and through paddle_xla, compare.

Each OpCase names a Paddle callable, its inputs and attributes (closed over in the callable), and
the pd_op it must produce. The harness captures the call with to_static, lowers the Graph, runs it
under jit, and compares outputs with Paddle eager; for float inputs it also compares Paddle's backward
with jax.grad of the lowering (jitted), using the same random cotangents. Only jit: paddle_xla runs a
lowering nowhere else, and the op-by-op run was three quarters of the table's time in CI (1262 of 1715
worker-seconds) while checking a path no user takes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import paddle
from paddle.static import InputSpec

from paddle_xla import capture, x64
from paddle_xla.lowering.lower import lower

FLOATS = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class Arg:
    shape: tuple[int, ...]
    dtype: str = "float32"
    low: float | None = None  # uniform in [low, high) for floats; integers in [low, high)
    high: float | None = None
    grad: bool = True  # differentiate w.r.t. this input (floats only)

    def make(self, rng: np.random.Generator) -> np.ndarray:
        if self.dtype == "bool":
            return rng.random(self.shape) > 0.5
        if self.dtype in FLOATS:
            if self.low is None:
                x = rng.standard_normal(self.shape)
            else:
                x = rng.uniform(self.low, self.high, self.shape)
            return x.astype("float32").astype(_np_dtype(self.dtype))
        lo, hi = (0 if self.low is None else self.low), (5 if self.high is None else self.high)
        return rng.integers(lo, hi, self.shape).astype(self.dtype)


@dataclass(frozen=True)
class Values(Arg):
    """An input of exactly these values (e.g. labels that must hit an ignore_index), not random ones."""

    values: tuple = ()

    def make(self, rng: np.random.Generator) -> np.ndarray:
        return np.asarray(self.values, dtype=_np_dtype(self.dtype)).reshape(self.shape)


def _np_dtype(name):
    return np.dtype(jnp.bfloat16) if name == "bfloat16" else np.dtype(name)


@dataclass(frozen=True)
class OpCase:
    id: str  # test id, unique
    fn: Callable  # paddle tensors -> tensor | tuple of tensors
    args: Sequence[Arg]
    ops: Sequence[str]  # pd_op names the captured Graph must contain
    grad: bool = True  # compare gradients of float inputs
    rtol: float = 1e-5
    atol: float = 1e-6
    grad_rtol: float | None = None  # defaults to 10 x rtol
    grad_atol: float | None = None
    reason: str = ""  # why the tolerance differs from the default
    outputs: Sequence[int] | None = None  # which outputs to compare (default all)
    seed: int = 0
    training: bool = False
    # NOTE: the same computation in Paddle's plain ops: the reference on a CPU where Paddle's own kernel for
    # the op dies (its fused-norm CPU kernels raise SIGILL on AVX2-only AMD EPYC); see own_kernel_runs.
    plain: Callable | None = None


class _Call1(paddle.nn.Layer):
    # NOTE: to_static needs a forward with named positional arguments, not *args; one class per arity.
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, a):
        return self.fn(a)


class _Call2(_Call1):
    def forward(self, a, b):
        return self.fn(a, b)


class _Call3(_Call1):
    def forward(self, a, b, c):
        return self.fn(a, b, c)


class _Call4(_Call1):
    def forward(self, a, b, c, d):
        return self.fn(a, b, c, d)


class _Call5(_Call1):
    def forward(self, a, b, c, d, e):
        return self.fn(a, b, c, d, e)


class _Call6(_Call1):
    def forward(self, a, b, c, d, e, f):
        return self.fn(a, b, c, d, e, f)


_CALLS = {1: _Call1, 2: _Call2, 3: _Call3, 4: _Call4, 5: _Call5, 6: _Call6}


def _to_list(out):
    if isinstance(out, (list, tuple)):
        return [o for x in out for o in _to_list(x)]
    return [out]


def _as_np(t) -> np.ndarray:
    if t.dtype == paddle.bfloat16:
        return np.asarray(t.astype("float32").numpy()).astype(jnp.bfloat16)
    return t.numpy()


def _paddle_tensor(x: np.ndarray, dtype: str, grad: bool):
    if dtype == "bfloat16":
        t = paddle.to_tensor(x.astype("float32")).astype("bfloat16")
    else:
        t = paddle.to_tensor(x)
    t.stop_gradient = not grad
    return t


def run_paddle(case: OpCase, xs: list[np.ndarray], cot_seed: int, fn: Callable | None = None):
    """Paddle eager outputs of fn (the case's own call unless given), and grads of sum(out * cotangent)
    w.r.t. the differentiable inputs."""
    diff = [case.grad and a.grad and a.dtype in FLOATS for a in case.args]
    ts = [_paddle_tensor(x, a.dtype, d) for x, a, d in zip(xs, case.args, diff)]
    outs = _to_list((fn or case.fn)(*ts))
    sel = case.outputs if case.outputs is not None else range(len(outs))
    outs = [outs[i] for i in sel]
    out_np = [_as_np(o) for o in outs]
    cots = _cotangents(out_np, cot_seed)
    grads = None
    if any(diff):
        loss = None
        for o, c in zip(outs, cots):
            if c is None or o.stop_gradient:
                continue
            term = (o.astype("float32") * paddle.to_tensor(c.astype("float32"))).sum()
            loss = term if loss is None else loss + term
        if loss is not None:
            grad_ts = [t for t, d in zip(ts, diff) if d]
            gs = paddle.grad(loss, grad_ts, allow_unused=True)
            grads = [None if g is None else _as_np(g) for g in gs]
    return out_np, grads, cots, diff


def _cotangents(outs, seed):
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal(o.shape).astype("float32") if o.dtype.kind == "f" or o.dtype == jnp.bfloat16 else None
        for o in outs
    ]


_CAPTURED: dict[tuple, object] = {}


def capture_case(case: OpCase, xs):
    """Capture once per case (to_static is slow; a case may be checked more than once in a session)."""
    # NOTE: keyed by the function object too (kept alive by the key): ad-hoc cases reuse ids.
    key = (case.id, case.fn, case.training, tuple((x.shape, str(x.dtype)) for x in xs))
    if key not in _CAPTURED:
        _CAPTURED[key] = _capture(case, xs)
    return _CAPTURED[key]


def _capture(case: OpCase, xs):
    specs = [InputSpec(list(x.shape), a.dtype, f"x{i}") for i, (x, a) in enumerate(zip(xs, case.args))]
    return capture.from_layer(_CALLS[len(specs)](case.fn), specs, training=case.training).graph


def run_xla(case: OpCase, xs, cots, diff):
    graph = capture_case(case, xs)
    names = [f.name for f in graph.feeds]
    missing = [op for op in case.ops if op not in graph.op_names()]
    assert not missing, f"{case.id}: expected ops {missing} in the captured graph, found {graph.op_names()}"
    f = lower(graph)
    sel = case.outputs

    def forward(*feeds):
        outs, _ = f({}, {}, dict(zip(names, feeds)))
        outs = list(outs)
        return [outs[i] for i in sel] if sel is not None else outs

    outs = [np.asarray(o) for o in jax.jit(forward)(*xs)]
    grads = None
    if any(diff):
        idx = [i for i, d in enumerate(diff) if d]

        def loss(*dx):
            full = list(xs)
            for i, v in zip(idx, dx):
                full[i] = v
            total = 0.0
            for o, c in zip(forward(*full), cots):
                if c is not None:
                    total = total + jnp.sum(o.astype(jnp.float32) * c)
            return total

        g = jax.jit(jax.grad(loss, argnums=tuple(range(len(idx)))))
        grads = [np.asarray(v) for v in g(*[jnp.asarray(xs[i]) for i in idx])]
    return outs, grads


def assert_close(case: OpCase, got, want, what, rtol, atol):
    assert len(got) == len(want), f"{case.id}: {what}: {len(got)} values vs Paddle's {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if w is None:
            continue
        assert g.shape == w.shape, f"{case.id}: {what}[{i}] shape {g.shape} vs Paddle's {w.shape}"
        assert g.dtype == w.dtype, f"{case.id}: {what}[{i}] dtype {g.dtype} vs Paddle's {w.dtype}"
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{case.id}: {what}[{i}]")
        else:
            np.testing.assert_allclose(
                np.asarray(g, np.float64),
                np.asarray(w, np.float64),
                rtol=rtol,
                atol=atol,
                err_msg=f"{case.id}: {what}[{i}]",
            )


_PROBE = """
import importlib, sys
import numpy as np
harness, table = importlib.import_module(sys.argv[1]), importlib.import_module(sys.argv[2])
case = next(c for c in table.CASES if c.id == sys.argv[3])
harness.run_paddle(case, [a.make(np.random.default_rng(0)) for a in case.args], 0)
"""


_KERNELS_RUN: dict[tuple, bool] = {}


def own_kernel_runs(case: OpCase) -> bool:
    """Whether Paddle's own kernels for the case's ops run on this CPU: probed once per op set, by the first
    case that asks, in a child process, since a kernel built for instructions the CPU lacks kills its
    process (SIGILL), not a test."""
    ops = tuple(case.ops)
    if ops not in _KERNELS_RUN:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        r = subprocess.run(
            [sys.executable, "-c", _PROBE, __name__, case.fn.__module__, case.id],
            env=env,
            capture_output=True,
            timeout=300,
        )
        # NOTE: only an illegal instruction means "cannot run here"; any other failure is the test's to report.
        assert r.returncode in (0, -signal.SIGILL), f"{case.id}: probe failed:\n{r.stderr.decode()[-2000:]}"
        _KERNELS_RUN[ops] = r.returncode == 0
    return _KERNELS_RUN[ops]


def reference_fn(case: OpCase) -> Callable:
    return case.fn if case.plain is None or own_kernel_runs(case) else case.plain


def inputs(case: OpCase) -> list[np.ndarray]:
    """The case's inputs, drawn in order from one generator seeded by the case."""
    rng = np.random.default_rng(case.seed)
    return [a.make(rng) for a in case.args]


@x64.enabled
def check_case(case: OpCase):
    xs = inputs(case)
    want, want_grads, cots, diff = run_paddle(case, xs, case.seed + 1, reference_fn(case))
    got, got_grads = run_xla(case, xs, cots, diff)
    assert_close(case, got, want, "output", case.rtol, case.atol)
    if want_grads is not None:
        zero_if_none = [np.zeros_like(g) if w is None else w for g, w in zip(got_grads, want_grads)]
        assert_close(
            case, got_grads, zero_if_none, "grad", case.grad_rtol or case.rtol * 10, case.grad_atol or case.atol * 10
        )
