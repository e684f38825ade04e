"""Random ops: same shape and dtype as Paddle, the right distribution, reproducible from the key.

Also: ops whose output shape depends on input values (masked_select, nonzero, unique, bincount) are
reported as unsupported before anything runs."""

import jax
import numpy as np
import paddle
import pytest

from paddle_xla import x64
from paddle_xla.lowering.lower import check_graph, lower

from .harness import Arg, OpCase, capture_case

N = 200_000


@pytest.fixture(autouse=True)
def _x64():
    # NOTE: these tests call the internal lower() directly; the public entry points scope x64 themselves.
    with x64.scope():
        yield


def _run(fn, args, xs, key=0, use_jit=False):
    """Capture fn, lower it, run it with PRNG key `key`; also run Paddle eagerly for shape/dtype."""
    graph = capture_case(OpCase("random", fn, args, []), xs)
    f = lower(graph)
    names = [t.name for t in graph.feeds]

    def forward(k, *feeds):
        return f({}, {}, dict(zip(names, feeds)), k)[0]

    run = jax.jit(forward) if use_jit else forward
    got = [np.asarray(o) for o in run(jax.random.key(key), *xs)]
    want = fn(*[paddle.to_tensor(x) for x in xs])
    want = [w.numpy() for w in (want if isinstance(want, (list, tuple)) else [want])]
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{g.shape}/{g.dtype} vs Paddle's {w.shape}/{w.dtype}"
    return got[0], want[0]


def _feed(shape=(1,)):
    """A dummy input: to_static needs one, and *_like ops read its shape."""
    return [Arg(shape)], [np.zeros(shape, np.float32)]


def _close(value, expected, tol, what):
    assert abs(value - expected) < tol, f"{what}: {value} vs {expected} (tolerance {tol})"


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
def test_uniform(use_jit):
    args, xs = _feed()
    got, _ = _run(lambda x: paddle.uniform([N], min=-1.0, max=2.0), args, xs, use_jit=use_jit)
    assert got.min() >= -1.0 and got.max() < 2.0
    _close(got.mean(), 0.5, 0.01, "mean")
    _close(got.std(), 3 / np.sqrt(12), 0.01, "std")


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
def test_rand_like_uses_shape_arithmetic(use_jit):
    args, xs = _feed((400, 500))
    got, _ = _run(lambda x: paddle.rand_like(x), args, xs, use_jit=use_jit)
    assert got.min() >= 0.0 and got.max() < 1.0
    _close(got.mean(), 0.5, 0.01, "mean")


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_gaussian(dtype):
    args, xs = _feed()
    fn = lambda x: paddle.tensor.random.gaussian([N], mean=1.0, std=2.0, dtype=dtype)  # noqa: E731
    if dtype == "bfloat16":
        got = np.asarray(lower(capture_case(OpCase("g", fn, args, []), xs))({}, {}, {"x0": xs[0]})[0][0])
    else:
        got, _ = _run(fn, args, xs)
    _close(float(got.astype(np.float64).mean()), 1.0, 0.03, "mean")
    _close(float(got.astype(np.float64).std()), 2.0, 0.03, "std")


def test_randn_like():
    args, xs = _feed((400, 500))
    got, _ = _run(lambda x: paddle.randn_like(x), args, xs)
    _close(got.mean(), 0.0, 0.01, "mean")
    _close(got.std(), 1.0, 0.01, "std")


def test_truncated_gaussian():
    args, xs = _feed()
    fn = lambda x: paddle._C_ops.truncated_gaussian_random(  # noqa: E731
        [N], 0.5, 2.0, 0, -1.0, 3.0, paddle.float32, paddle.CPUPlace()
    )
    got, want = _run(fn, args, xs)
    assert got.min() >= -1.0 and got.max() <= 3.0
    _close(got.mean(), want.mean(), 0.03, "mean against Paddle's sample")
    _close(got.std(), want.std(), 0.03, "std against Paddle's sample")


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
def test_randint(use_jit):
    args, xs = _feed()
    got, _ = _run(lambda x: paddle.randint(-3, 7, [N]), args, xs, use_jit=use_jit)
    assert set(np.unique(got)) == set(range(-3, 7))
    _close(got.mean(), 1.5, 0.05, "mean")


def test_randint_like():
    args, xs = _feed((300, 400))
    got, _ = _run(lambda x: paddle.randint_like(x, 0, 5, dtype="int64"), args, xs)
    assert set(np.unique(got)) == set(range(5))


@pytest.mark.parametrize("dtype", ["int64", "int32", "float32"])
def test_randperm(dtype):
    args, xs = _feed()
    got, _ = _run(lambda x: paddle.randperm(1000, dtype=dtype), args, xs)
    np.testing.assert_array_equal(np.sort(got), np.arange(1000))
    assert not np.array_equal(got, np.arange(1000))


def test_bernoulli():
    p = np.full((N,), 0.3, np.float32)
    got, _ = _run(lambda x: paddle.bernoulli(x), [Arg((N,))], [p])
    assert set(np.unique(got)) == {0.0, 1.0}
    _close(got.mean(), 0.3, 0.01, "mean")


def test_binomial():
    count = np.full((N,), 10, np.int64)
    prob = np.full((N,), 0.3, np.float32)
    got, _ = _run(lambda n, p: paddle.binomial(n, p), [Arg((N,), "int64"), Arg((N,))], [count, prob])
    assert got.min() >= 0 and got.max() <= 10
    _close(got.mean(), 3.0, 0.03, "mean")


def test_poisson():
    lam = np.full((N,), 3.0, np.float32)
    got, _ = _run(lambda x: paddle.poisson(x), [Arg((N,))], [lam])
    _close(got.mean(), 3.0, 0.03, "mean")
    _close(got.var(), 3.0, 0.1, "variance")


def test_exponential():
    x = np.zeros((N,), np.float32)
    got, _ = _run(lambda t: paddle.tensor.random.exponential_(t, lam=2.0), [Arg((N,))], [x])
    assert got.min() >= 0
    _close(got.mean(), 0.5, 0.01, "mean")


def test_standard_gamma():
    alpha = np.full((N,), 2.0, np.float32)
    got, _ = _run(lambda x: paddle.standard_gamma(x), [Arg((N,))], [alpha])
    _close(got.mean(), 2.0, 0.03, "mean")
    _close(got.var(), 2.0, 0.1, "variance")


def test_dirichlet():
    alpha = np.tile(np.array([[1.0, 2.0, 5.0]], np.float32), (N // 10, 1))
    got, _ = _run(lambda a: paddle.distribution.Dirichlet(a).sample(), [Arg(alpha.shape)], [alpha])
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(got.mean(0), [0.125, 0.25, 0.625], atol=0.01)


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
def test_multinomial_with_replacement(use_jit):
    probs = np.array([[0.1, 0.2, 0.7], [0.5, 0.0, 0.5]], np.float32)
    got, _ = _run(lambda p: paddle.multinomial(p, 50_000, replacement=True), [Arg((2, 3))], [probs], use_jit=use_jit)
    for row, p in zip(got, probs):
        np.testing.assert_allclose(np.bincount(row, minlength=3) / row.size, p, atol=0.01)


def test_multinomial_without_replacement():
    probs = np.tile(np.array([[0.1, 0.2, 0.3, 0.4]], np.float32), (20_000, 1))
    got, _ = _run(lambda p: paddle.multinomial(p, 3), [Arg(probs.shape)], [probs])
    assert all(len(set(r)) == 3 for r in got[:1000])
    np.testing.assert_allclose(np.bincount(got[:, 0], minlength=4) / len(got), probs[0], atol=0.015)


def test_key_reproducible_and_seed_fixed():
    args, xs = _feed()
    a, _ = _run(lambda x: paddle.rand([100]), args, xs, key=1)
    b, _ = _run(lambda x: paddle.rand([100]), args, xs, key=1)
    c, _ = _run(lambda x: paddle.rand([100]), args, xs, key=2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # NOTE: a nonzero seed attribute pins the op's stream, whatever the step's key.
    s1, _ = _run(lambda x: paddle.uniform([100], seed=7), args, xs, key=1)
    s2, _ = _run(lambda x: paddle.uniform([100], seed=7), args, xs, key=2)
    np.testing.assert_array_equal(s1, s2)


def test_two_random_ops_draw_different_numbers():
    args, xs = _feed()
    got, _ = _run(lambda x: paddle.stack([paddle.rand([100]), paddle.rand([100])]), args, xs)
    assert not np.array_equal(got[0], got[1])


# ---- data-dependent shapes: reported, never lowered --------------------------------------------
@pytest.mark.parametrize(
    "fn, op",
    [
        (lambda x, m: paddle.masked_select(x, m), "pd_op.masked_select"),
        (lambda x, m: paddle.unique(x), "pd_op.unique"),
        (lambda x, m: paddle.bincount(m.astype("int64").flatten()), "pd_op.bincount"),
    ],
    ids=["masked_select", "unique", "bincount"],
)
def test_data_dependent_shapes_are_reported(fn, op):
    args = [Arg((4, 5)), Arg((4, 5), "bool")]
    xs = [np.zeros((4, 5), np.float32), np.ones((4, 5), bool)]
    report = check_graph(capture_case(OpCase("dd", fn, args, []), xs))
    assert op in report.unsupported, report.describe()


def test_bool_mask_from_inputs_fails_clearly():
    # NOTE: nonzero is lowered for constant masks only; a mask computed from the inputs fails at
    # trace time with a message that says why and what to use instead.
    args = [Arg((4, 5)), Arg((4,), "bool")]
    xs = [np.zeros((4, 5), np.float32), np.ones((4,), bool)]
    f = lower(capture_case(OpCase("mask", lambda x, m: x[m], args, []), xs))
    with pytest.raises(Exception, match="data-dependent shape"):
        jax.jit(lambda x, m: f({}, {}, {"x0": x, "x1": m}))(*xs)
