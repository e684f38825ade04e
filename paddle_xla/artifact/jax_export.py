"""jax.export of a function over a Graph's feeds, for the platforms asked: with the feeds' None
dimensions symbolic when the program allows, else for the concrete shapes of example inputs. What
both artifact kinds serialize goes through here. Paddle-free."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from ..errors import ExportError
from ..graph import Graph
from ..ops.util import dtype as jax_dtype
from ..runtime import feeds as feeds_mod
from .container import PLATFORMS


def check_platforms(platforms: Sequence[str]) -> list[str]:
    platforms = [platforms] if isinstance(platforms, str) else list(platforms)
    bad = [p for p in platforms if p not in PLATFORMS]
    if bad or not platforms:
        raise ExportError(f"Unknown platform(s) {bad}; choose from {list(PLATFORMS)}.")
    return list(dict.fromkeys(platforms))


def export_all(make_f, graph: Graph, head, tail: tuple, platforms, example_inputs) -> tuple[dict[str, bytes], dict]:
    """Serialized executables of make_f(platform)(*head, feeds, *tail) by platform, and how the feed
    shapes were chosen. `head` may be a function of the platform (weights laid out per platform)."""
    head_of = head if callable(head) else (lambda _p: head)
    feed_specs, shapes = _symbolic_specs(graph), "symbolic"
    try:
        first = jax.export.export(make_f(platforms[0]), platforms=[platforms[0]])(
            *head_of(platforms[0]), feed_specs, *tail
        )
    except Exception as e:  # NOTE: e.g. shape arithmetic kept in NumPy cannot take a symbolic dimension
        if example_inputs is None:
            raise ExportError(
                f"The program does not export with symbolic dimensions ({type(e).__name__}: "
                f"{e}). Pass example_inputs=[...] to export it for those concrete shapes."
            ) from e
        feed_specs, shapes = _concrete_specs(graph, example_inputs), "concrete"
        first = None
    out = {}
    for p in platforms:
        try:
            exp = (
                first
                if (first is not None and p == platforms[0])
                else jax.export.export(make_f(p), platforms=[p])(*head_of(p), feed_specs, *tail)
            )
        except Exception as e:
            raise ExportError(f"Exporting for platform {p!r} failed: {type(e).__name__}: {e}") from e
        out[p] = bytes(exp.serialize())
    feeds = {k: [d if isinstance(d, int) else str(d) for d in v.shape] for k, v in feed_specs.items()}
    return out, {"shapes": shapes, "feed_shapes": feeds}


def avals(tree: Mapping[str, Any]) -> dict[str, jax.ShapeDtypeStruct]:
    # NOTE: leaf by leaf: a weight held as weight-only int8 is a (values, scales) pair
    return jax.tree.map(lambda v: jax.ShapeDtypeStruct(np.shape(v), v.dtype), dict(tree))


def _symbolic_specs(graph: Graph) -> dict[str, jax.ShapeDtypeStruct]:
    """A None dimension at position i is the symbol d<i>, shared by all inputs."""
    # NOTE: sharing by position matches the usual case (batch first, sequence second, the same in
    # every input); unrelated dims wrongly shared only make a call fall back to re-lowering.
    scope = jax.export.SymbolicScope()  # NOTE: one scope, so that d0 of two inputs is one symbol
    out = {}
    for t in graph.feeds:
        dims = ",".join(f"d{i}" if d < 0 else str(d) for i, d in enumerate(t.shape))
        shape = jax.export.symbolic_shape(dims, scope=scope) if t.shape else ()
        out[t.name] = jax.ShapeDtypeStruct(shape, jax_dtype(t.dtype))
    return out


def _concrete_specs(graph: Graph, example_inputs) -> dict[str, jax.ShapeDtypeStruct]:
    if isinstance(example_inputs, Mapping):
        bound = feeds_mod.bind(graph.feeds, (), example_inputs)
    else:
        bound = feeds_mod.bind(graph.feeds, list(example_inputs), {})
    arrays = {t.name: feeds_mod.check(t, bound[t.name]) for t in graph.feeds}
    return {k: jax.ShapeDtypeStruct(tuple(v.shape), v.dtype) for k, v in arrays.items()}
