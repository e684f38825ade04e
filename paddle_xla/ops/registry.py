"""The lowering registry: one small pure function per Paddle op.

A plain lowering is `fn(*inputs, **attrs)`; a random one also takes a PRNG key first; a control-flow
one takes the interpreter (to run its sub-blocks) and the Op. Attributes are keyword-only
parameters, and the registry knows which each lowering accepts, so an attribute nobody expected is
reported instead of silently ignored (tf2jax's `_check_attrs`).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

REGISTRY: dict[str, "Lowering"] = {}


@dataclass(frozen=True)
class Lowering:
    name: str
    fn: Callable
    kind: str                      # "plain" | "random" | "control"
    accepted: frozenset[str]       # attribute names the function takes
    required: frozenset[str]       # attribute names without a default
    ignored: frozenset[str]        # attributes known to carry no meaning for XLA

    def attr_problems(self, attrs) -> list[str]:
        """What is wrong with an op's attributes, as short sentences (empty when fine)."""
        given = set(attrs) - self.ignored
        problems = [f"unexpected attribute {a!r}={attrs[a]!r}" for a in sorted(given - self.accepted)]
        problems += [f"missing attribute {a!r}" for a in sorted(self.required - given)]
        return problems

    def kwargs(self, attrs) -> dict:
        return {k: v for k, v in attrs.items() if k not in self.ignored}


def lowering(*names: str, kind: str = "plain", ignore: tuple[str, ...] = ()):
    """Register `fn` as the lowering of each Paddle op in `names`.

    `ignore` lists attributes that only steer Paddle's own kernels (e.g. `use_cudnn`)."""
    def register(fn):
        params = inspect.signature(fn).parameters.values()
        kw = [p for p in params if p.kind is p.KEYWORD_ONLY]
        accepted = frozenset(p.name for p in kw)
        required = frozenset(p.name for p in kw if p.default is p.empty)
        for name in names:
            if name in REGISTRY:
                raise RuntimeError(f"{name} is lowered twice ({REGISTRY[name].fn.__module__} and {fn.__module__})")
            REGISTRY[name] = Lowering(name, fn, kind, accepted, required, frozenset(ignore))
        return fn
    return register


def supported_ops() -> list[str]:
    """The Paddle op names paddle_xla can lower, sorted."""
    return sorted(REGISTRY)
