"""train.clip against paddle.nn.ClipGradBy*, called on (param, grad) lists as Optimizer.step() does."""

import jax.numpy as jnp
import numpy as np
import paddle
import pytest

from paddle_xla.interop.paddle_optimizer import optimizer_config
from paddle_xla.train import clip as clip_lib
from paddle_xla.train import optim

SHAPES = {"a": (4, 3), "b": (3,), "c": (2, 5)}


@pytest.fixture(autouse=True)
def fresh_paddle_names():
    with paddle.utils.unique_name.guard():
        yield


def make_case(scale, no_clip=(), zero=()):
    rng = np.random.default_rng(7)
    grads = {n: (0.0 if n in zero else scale) * rng.standard_normal(s).astype("float32") for n, s in SHAPES.items()}
    params = {
        n: paddle.create_parameter(list(s), "float32", attr=paddle.ParamAttr(name=n, need_clip=n not in no_clip))
        for n, s in SHAPES.items()
    }
    return params, grads


def paddle_clip(clip, params, grads):
    pairs = [(params[n], paddle.to_tensor(grads[n])) for n in SHAPES]
    return {p.name: g.numpy() for p, g in clip(pairs)}


def our_clip(clip, params, grads):
    need = {n: p.need_clip for n, p in params.items()}
    out = clip_lib.clip_grads(clip, {n: jnp.asarray(g) for n, g in grads.items()}, need)
    return {n: np.asarray(g) for n, g in out.items()}


CASES = {
    "global_norm_clips": (lambda: paddle.nn.ClipGradByGlobalNorm(1.0), 2.0, ()),
    "global_norm_inside": (lambda: paddle.nn.ClipGradByGlobalNorm(100.0), 1.0, ()),
    "global_norm_need_clip": (lambda: paddle.nn.ClipGradByGlobalNorm(1.0), 2.0, ("b",)),
    "global_norm_all_excluded": (lambda: paddle.nn.ClipGradByGlobalNorm(1.0), 2.0, ("a", "b", "c")),
    "global_norm_skip_clips": (lambda: paddle.nn.ClipGradByGlobalNorm(1.0, auto_skip_clip=True), 2.0, ()),
    "global_norm_skip_inside": (lambda: paddle.nn.ClipGradByGlobalNorm(100.0, auto_skip_clip=True), 1.0, ()),
    "norm": (lambda: paddle.nn.ClipGradByNorm(1.5), 1.0, ("c",)),
    "value": (lambda: paddle.nn.ClipGradByValue(0.7), 1.0, ()),
    "value_asymmetric": (lambda: paddle.nn.ClipGradByValue(max=0.5, min=-0.1), 1.0, ("a",)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_clip_matches_paddle(case):
    make_clip, scale, no_clip = CASES[case]
    params, grads = make_case(scale, no_clip)
    ours = our_clip(
        optimizer_config(paddle.optimizer.SGD(0.1, parameters=list(params.values()), grad_clip=make_clip())).grad_clip,
        params,
        grads,
    )
    theirs = paddle_clip(make_clip(), params, grads)
    for name in SHAPES:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-6, atol=1e-7, err_msg=name)
    for name in no_clip:
        np.testing.assert_array_equal(ours[name], grads[name])


def test_clip_by_norm_of_a_zero_gradient():
    params, grads = make_case(1.0, zero=("b",))
    clip = paddle.nn.ClipGradByNorm(0.5)
    ours = our_clip(clip_lib.ClipGradByNorm(0.5), params, grads)
    np.testing.assert_allclose(ours["a"], paddle_clip(clip, params, grads)["a"], rtol=1e-6)
    np.testing.assert_array_equal(ours["b"], 0.0)


def test_value_clip_defaults_to_symmetric():
    assert clip_lib.ClipGradByValue(2.0).min == -2.0


def test_global_norm_is_over_each_parameter_group():
    """Paddle clips each parameter group on its own: two groups, two global norms."""
    params, grads = make_case(2.0)
    clip = paddle.nn.ClipGradByGlobalNorm(1.0)
    opt = paddle.optimizer.SGD(
        0.1, grad_clip=clip, parameters=[{"params": [params["a"]]}, {"params": [params["b"], params["c"]]}]
    )
    config = optimizer_config(opt)
    ours = optim.clip_all(config, {n: jnp.asarray(g) for n, g in grads.items()})
    first = paddle_clip_subset(clip, params, grads, ["a"])
    second = paddle_clip_subset(clip, params, grads, ["b", "c"])
    for name, theirs in {**first, **second}.items():
        np.testing.assert_allclose(np.asarray(ours[name]), theirs, rtol=1e-6, err_msg=name)
    assert np.linalg.norm(np.asarray(ours["a"])) == pytest.approx(1.0, rel=1e-5)


def paddle_clip_subset(clip, params, grads, names):
    pairs = [(params[n], paddle.to_tensor(grads[n])) for n in names]
    return {p.name: g.numpy() for p, g in clip(pairs)}
