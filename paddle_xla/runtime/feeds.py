"""Checking what the user feeds against what the Graph expects, before XLA ever sees it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from ..errors import FeedError
from ..graph import Tensor
from ..ops.util import dtype as jax_dtype


def bind(feeds: Sequence[Tensor], args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Match positional and named inputs to the Graph's feeds, in the InputSpecs' order. One dict of
    arrays by input name (a detection model's `{"image": ..., "im_shape": ...}`) is taken as named inputs."""
    names = [f.name for f in feeds]
    if len(args) == 1 and isinstance(args[0], Mapping) and not kwargs:
        given = dict(args[0])
        extra, missing = sorted(set(given) - set(names)), [n for n in names if n not in given]
        if extra or missing:
            raise FeedError(
                f"The input dict has {'unknown keys ' + str(extra) if extra else ''}"
                f"{' and ' if extra and missing else ''}{'no ' + str(missing) if missing else ''}; "
                f"the model's inputs are {names}."
            )
        args, kwargs = (), given
    if len(args) > len(names):
        raise FeedError(f"Got {len(args)} positional inputs, but the model takes {len(names)}: {names}.")
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise FeedError(f"Unknown input {k!r}; the model's inputs are {names}.")
        if k in bound:
            raise FeedError(f"Input {k!r} was given twice (positionally and by name).")
        bound[k] = v
    missing = [n for n in names if n not in bound]
    if missing:
        raise FeedError(
            f"Missing input(s) {missing}; the model's inputs are {names}. "
            "Pass one array per InputSpec, in order or by name."
        )
    return bound


def checked(feeds: Sequence[Tensor], args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs of one call bound to the Graph's feeds (bind) and each checked (check): what every
    runnable does with its arguments before XLA sees them."""
    bound = bind(feeds, args, kwargs)
    return {f.name: check(f, bound[f.name]) for f in feeds}


def shape_problem(name: str, shape, expected, spec: str) -> str | None:
    """What is wrong with an input's rank or fixed dimensions (-1 in `expected` is free), or None."""
    shape, expected = list(shape), list(expected)
    if len(shape) != len(expected):
        return (
            f"Input {name!r} has rank {len(shape)} (shape {shape}), but the model expects rank {len(expected)}: {spec}."
        )
    bad = [i for i, (got, want) in enumerate(zip(shape, expected)) if want >= 0 and got != want]
    if bad:
        return f"Input {name!r} has shape {shape}, but dimension(s) {bad} must be {[expected[i] for i in bad]}: {spec}."
    return None


def check(feed: Tensor, value) -> np.ndarray | Any:
    """Validate one input's rank, fixed dimensions and dtype; return it as an array."""
    arr = value if hasattr(value, "shape") and hasattr(value, "dtype") else np.asarray(value)
    shape = tuple(arr.shape)
    spec = _spec_text(feed)
    problem = shape_problem(feed.name, shape, feed.shape, spec)
    if problem:
        raise FeedError(problem)
    want = np.dtype(jax_dtype(feed.dtype))
    got = np.dtype(arr.dtype)
    if got == np.int32 and want == np.int64 and isinstance(arr, jax.Array):
        # NOTE: JAX without x64 (paddle_xla never turns it on for the process) holds integers as int32;
        # widening them is exact, and is the only way such a caller can feed an int64 input.
        return arr.astype(want)
    if got != want:
        raise FeedError(
            f"Input {feed.name!r} has dtype {got.name}, but the model expects {feed.dtype}: {spec}. "
            f"Convert it first, e.g. x.astype('{feed.dtype}')."
        )
    return arr


def _spec_text(feed: Tensor) -> str:
    dims = ",".join("None" if d < 0 else str(d) for d in feed.shape)
    return f"InputSpec([{dims}], '{feed.dtype}', '{feed.name}')"
