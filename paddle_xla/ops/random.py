"""Random ops. Each takes the PRNG key the interpreter splits off for it (lower.py op_key).

They cannot match Paddle's numbers, only its distributions: tests/ops/test_random.py checks shapes,
dtypes and sample statistics. A nonzero `seed` attribute pins the op to its own fixed stream, as a
seeded Paddle op repeats its numbers on every run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .registry import lowering
from .util import dtype as jax_dtype
from .util import static_ints, static_scalar


def _key(key, seed):
    return jax.random.key(seed) if seed else key


def _scalar(v, dt):
    return jnp.asarray(static_scalar(v) if isinstance(v, (np.ndarray, np.generic)) else v, dtype=dt).reshape(())


@lowering("pd_op.uniform", kind="random")
def uniform(key, shape, low, high, *, dtype, seed=0):
    dt = jax_dtype(dtype)
    return jax.random.uniform(_key(key, seed), tuple(static_ints(shape)), dt, _scalar(low, dt), _scalar(high, dt))


@lowering("pd_op.gaussian", kind="random")
def gaussian(key, shape, *, mean, std, seed=0, dtype):
    dt = jax_dtype(dtype)
    z = jax.random.normal(_key(key, seed), tuple(static_ints(shape)), dt)
    return z * jnp.asarray(std, dt) + jnp.asarray(mean, dt)


@lowering("pd_op.truncated_gaussian_random", kind="random")
def truncated_gaussian_random(key, *, shape, mean, std, seed=0, a=-2.0, b=2.0, dtype="float32"):
    # NOTE: a and b bound the sample itself (not in units of std), as Paddle's kernel clamps it.
    dt = jax_dtype(dtype)
    z = jax.random.truncated_normal(_key(key, seed), (a - mean) / std, (b - mean) / std, tuple(shape), jnp.float32)
    return jnp.clip(z * std + mean, a, b).astype(dt)


@lowering("pd_op.randint", kind="random")
def randint(key, shape, *, low, high, dtype="int64"):
    return jax.random.randint(key, tuple(static_ints(shape)), low, high, jax_dtype(dtype))


@lowering("pd_op.randperm", kind="random")
def randperm(key, *, n, dtype="int64"):
    return jax.random.permutation(key, n).astype(jax_dtype(dtype))


@lowering("pd_op.bernoulli", kind="random")
def bernoulli(key, x):
    return (jax.random.uniform(key, x.shape, x.dtype) < x).astype(x.dtype)


@lowering("pd_op.binomial", kind="random")
def binomial(key, count, prob):
    draws = jax.random.binomial(key, count.astype(prob.dtype), prob, prob.shape, prob.dtype)
    return draws.astype(jnp.int64)


@lowering("pd_op.poisson", kind="random")
def poisson(key, x):
    return jax.random.poisson(key, x, x.shape).astype(x.dtype)


@lowering("pd_op.exponential_", kind="random")
def exponential_(key, x, *, lam=1.0):
    return jax.random.exponential(key, x.shape, x.dtype) / jnp.asarray(lam, x.dtype)


@lowering("pd_op.standard_gamma", kind="random")
def standard_gamma(key, x):
    return jax.random.gamma(key, x, x.shape, x.dtype)


@lowering("pd_op.dirichlet", kind="random")
def dirichlet(key, alpha):
    return jax.random.dirichlet(key, alpha, alpha.shape[:-1], alpha.dtype)


@lowering("pd_op.multinomial", kind="random")
def multinomial(key, x, num_samples, *, replacement=False):
    n = int(static_scalar(num_samples))
    logits = jnp.log(x.astype(jnp.float32))
    if replacement:
        draws = jax.random.categorical(key, logits, axis=-1, shape=(n,) + x.shape[:-1])
        return jnp.moveaxis(draws, 0, -1).astype(jnp.int64)
    # NOTE: without replacement: the Gumbel top-k trick draws k distinct categories in one shot.
    gumbel = jax.random.gumbel(key, x.shape, jnp.float32)
    return jax.lax.top_k(logits + gumbel, n)[1].astype(jnp.int64)
