"""Differential fuzzing against Paddle eager: for each op of ops_table.TABLE, hypothesis draws shapes
(rank 0, size-0 and size-1 dims, broadcasting pairs), a dtype, attributes (negative axes, keepdim,
...) and values (in plain examples moderate ones; in special examples also NaN, +-inf, -0.0, huge and
denormal values). The one-op Layer is compiled with px.compile for InputSpecs of exactly those shapes
and dtypes, and its outputs must match Paddle's in dtype and shape exactly and in value (NaN and inf
in the same places, tolerances per dtype). For float inputs the gradient of sum(out * cotangent)
from Paddle's autograd must match jax.grad of the lowered Graph (as tests/ops/harness.py does).

CI runs EXAMPLES examples per op, derandomized (the same stream every run). `make fuzz` sets
PADDLE_XLA_FUZZ_EXAMPLES and draws a fresh random stream; each failure prints a reproducer.
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from ops import harness  # NOTE: conftest puts tests/ on sys.path; tests/ops is the package "ops"
from paddle.static import InputSpec

import paddle_xla as px
from paddle_xla import x64
from paddle_xla.lowering.lower import lower

from . import layers
from .ops_table import BF16, BOOL, F16, F32, F64, TABLE

SWEEP = "PADDLE_XLA_FUZZ_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("PADDLE_XLA_FUZZ_EXAMPLES", "3"))  # NOTE: per op; CI: ~120 ops x 3

# rtol, atol per dtype: a few units in the last place of each format
TOL = {F64: (1e-10, 1e-12), F32: (1e-5, 1e-6), F16: (2e-3, 1e-3), BF16: (1.6e-2, 1e-2)}

DOMAINS = {"any": (-4.0, 4.0), "pos": (0.05, 4.0), "unit": (-0.95, 0.95), "ge1": (1.05, 4.0), "unit01": (0.05, 0.95)}


def _np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == BF16 else np.dtype(name)


def _specials(dtype, accum, denormals):
    fi = ml_dtypes.finfo(ml_dtypes.bfloat16) if dtype == BF16 else np.finfo(dtype)
    # NOTE: ops that add or multiply many values get a smaller "huge" (sqrt of max): products of two
    # stay finite, so overflow does not hinge on the order Paddle and XLA happen to accumulate in
    huge = math.sqrt(float(fi.max)) / 8 if accum else float(fi.max) / 2
    tiny = float(fi.smallest_subnormal) * 3
    vals = [math.nan, math.inf, -math.inf, -0.0, 0.0, huge, -huge, 1.0, -1.0]
    return vals + [tiny, -tiny] if denormals else vals


def _values(data, shape, dtype, domain, special, op, label):
    if dtype == BOOL:
        return data.draw(hnp.arrays(np.bool_, shape), label=label)
    if dtype in ("int32", "int64"):
        lo, hi = (1, 20) if domain != "any" else (-20, 20)
        elems = st.integers(lo, hi)
        if special:
            info = np.iinfo(dtype)
            elems = st.one_of(elems, st.sampled_from([0, -1, int(info.max), int(info.min)]))
        return data.draw(hnp.arrays(np.dtype(dtype), shape, elements=elems), label=label)
    lo, hi = DOMAINS[domain]
    elems = st.floats(lo, hi)
    if special:
        allowed = _specials(dtype, op.accum, op.denormals)
        if op.specials is not None:
            allowed = [v for v in allowed if v in op.specials]
        elems = st.one_of(elems, st.sampled_from(allowed))
    x = data.draw(hnp.arrays(np.float64, shape, elements=elems), label=label)
    return x.astype(_np_dtype(dtype))


def _layer(op, n, kw):
    table = layers.LISTED if op.extra.get("list_input") else layers.ONE
    return table[n](op.f, kw)


def _eager_fn(op, kw):
    if op.extra.get("list_input"):
        return lambda *ts: op.f(list(ts), **kw)
    return lambda *ts: op.f(*ts, **kw)


def _lit(v):
    if isinstance(v, list):
        return "[" + ", ".join(_lit(x) for x in v) + "]"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return repr(v)


def reproducer(op, xs, dtypes, kw):
    """The case's inputs as a script, with the Paddle call that takes them (attributes as keywords)."""
    lines = [
        "import numpy as np, paddle, paddle_xla as px, ml_dtypes",
        "nan, inf = float('nan'), float('inf')",
        f"# op {op.name}: {op.f.__module__}.{op.f.__name__}(..., **{kw!r})",
    ]
    for i, (x, d) in enumerate(zip(xs, dtypes)):
        vals = x.astype("float64").tolist() if d in (F16, BF16) else x.tolist()
        npd = "ml_dtypes.bfloat16" if d == BF16 else repr(d)
        lines.append(f"x{i} = np.array({_lit(vals)}, dtype={npd}).reshape({x.shape!r})  # {d}")
    lines.append(f"# shapes {[x.shape for x in xs]}, dtypes {list(dtypes)}")
    return "\n".join(lines)


def _as_list(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _close(got, want, dtype, rtol, atol, what):
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} vs Paddle's {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs Paddle's {want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{what}: NaN positions differ")
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=what)


def _tol(op, xs, dtypes, out_dtype):
    name = str(out_dtype)
    rtol, atol = TOL.get(name, TOL.get(dtypes[0] if dtypes[0] in TOL else F32, TOL[F32]))
    rtol, atol = rtol * op.tol, atol * op.tol
    if op.accum:
        # NOTE: sums of many values round differently in different orders: allow rtol of sum(|x|)
        scale = 1.0
        for x in xs[:2]:
            v = np.abs(np.asarray(x, np.float64))
            v = v[np.isfinite(v)]
            scale *= max(1.0, float(v.sum()) if v.size else 1.0)
        atol = atol + rtol * scale
    return rtol, atol


@x64.enabled
def _our_grads(model, xs, cots, diff):
    f = lower(model.graph)
    names = [feed.name for feed in model.graph.feeds]
    idx = [i for i, d in enumerate(diff) if d]

    def loss(*dx):
        full = list(xs)
        for i, v in zip(idx, dx):
            full[i] = v
        outs, _ = f({}, {}, dict(zip(names, full)))
        total = 0.0
        for o, c in zip(list(outs), cots):
            if c is not None:
                total = total + jnp.sum(o.astype(jnp.float32) * c)
        return total

    # NOTE: not jitted: for one op, compiling the gradient costs more than running it op by op
    g = jax.grad(loss, argnums=tuple(range(len(idx))))
    return [np.asarray(v) for v in g(*[jnp.asarray(xs[i]) for i in idx])]


def check(data, op):
    ins, kw = op.draw(data, op)
    dtype = data.draw(st.sampled_from(op.dtypes), label="dtype")
    shapes_ = [s for s, _ in ins]
    if op.dtype_ok is not None and not op.dtype_ok(dtype, shapes_, kw):
        dtype = data.draw(st.sampled_from([d for d in op.dtypes if op.dtype_ok(d, shapes_, kw)]), label="dtype2")
    dtypes = [d or dtype for _, d in ins]
    special = data.draw(st.integers(0, 2), label="mode") == 2  # one example in three has special values
    xs = [_values(data, s, d, op.domain, special, op, f"x{i}") for i, (s, d) in enumerate(zip(shapes_, dtypes))]
    if op.fix is not None:
        xs = op.fix(xs, kw)
    repro = lambda: reproducer(op, xs, dtypes, kw)  # noqa: E731

    case = harness.OpCase(
        op.name,
        _eager_fn(op, kw),
        [harness.Arg(tuple(x.shape), d, grad=op.grad) for x, d in zip(xs, dtypes)],
        [],
        grad=op.grad,
    )
    want, want_grads, cots, diff = harness.run_paddle(case, xs, cot_seed=1)

    # NOTE: integer and bool inputs carry no gradient, as a user's specs say (Paddle's to_static refuses a bool
    # tile input that could take one)
    specs = [
        InputSpec(list(x.shape), d, f"x{i}", stop_gradient=np.dtype(x.dtype).kind in "biu")
        for i, (x, d) in enumerate(zip(xs, dtypes))
    ]
    model = px.compile(_layer(op, len(xs), kw), specs)
    got = [np.asarray(o) for o in _as_list(model(*xs))]
    assert len(got) == len(want), f"{len(got)} outputs vs Paddle's {len(want)}\n{repro()}"
    for i, (g, w) in enumerate(zip(got, want)):
        rtol, atol = _tol(op, xs, dtypes, w.dtype)
        try:
            _close(g, w, dtype, rtol, atol, f"{op.name} output {i}")
        except AssertionError as e:
            raise AssertionError(f"{e}\nattrs {kw}\nours   {g!r}\nPaddle {w!r}\n{repro()}") from None
    if want_grads is None:
        return
    got_grads = _our_grads(model, xs, cots, diff)
    k = 0
    for i, d in enumerate(diff):
        if not d:
            continue
        g, w = got_grads[k], want_grads[k]
        k += 1
        w = np.zeros_like(g) if w is None else w
        rtol, atol = _tol(op, xs, dtypes, w.dtype)
        try:
            _close(g, w, dtypes[i], rtol * 10, atol * 10, f"{op.name} grad of x{i}")
        except AssertionError as e:
            raise AssertionError(f"{e}\nattrs {kw}\ncotangents {cots}\nours   {g!r}\nPaddle {w!r}\n{repro()}") from None


@pytest.mark.parametrize("op", TABLE, ids=[op.name for op in TABLE])
def test_matches_paddle(op):
    @settings(
        max_examples=EXAMPLES,
        derandomize=not SWEEP,
        deadline=None,
        database=None,
        print_blob=SWEEP,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def one(data):
        check(data, op)

    one()
