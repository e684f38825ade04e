"""The lowering registry: one small pure function per Paddle op, and what the rest of the package
needs to know about the op, declared once where it is registered.

A plain lowering is `fn(*inputs, **attrs)`; a random one also takes a PRNG key first; a control-flow
one takes the interpreter (to run its sub-blocks) and the Op. Attributes are keyword-only
parameters, and the registry knows which each lowering accepts, so an attribute nobody expected is
reported instead of silently ignored (tf2jax's `_check_attrs`).

The properties an op declares (`@lowering(..., amp=, layout=, draws_unless=, inplace=)`, and
`declare(..., data_dependent=)` for an op refused on purpose) are read by lowering/ as queries on
this registry (`ops_where`, `properties`): lowering/half.py's AMP lists, lowering/channels_last.py's
NHWC classes, interpreter.draws_random and data_dependent.refusal. ops/ never imports lowering/.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

# NOTE: Paddle AMP O1's lists (paddle.static.amp.fp16_lists): white runs in half, black in float32,
# gray (every other op) in the dtype its inputs already have.
AMP_CLASSES = ("white", "black", "gray")
# NOTE: which ops can hold CNN activations channels-last (lowering/channels_last.py):
#   "conv"         a convolution: takes its activation NHWC (with data_format) when its filter is tracked;
#   "data_format"  takes NHWC through its data_format attribute as Paddle defines it (output 0 the activation);
#   "unary"        reads and writes the activation elementwise; its output keeps its input's layout;
#   "binary"       an elementwise op of two broadcast operands;
#   None           reads NCHW, as the program declares it.
LAYOUT_CLASSES = ("conv", "data_format", "unary", "binary", None)


@dataclass(frozen=True)
class Properties:
    """What an op declares besides its lowering. The defaults are what an op without a declaration gets."""

    amp: str = "gray"  # one of AMP_CLASSES
    layout: str | None = None  # one of LAYOUT_CLASSES
    draws_unless: str | None = None  # a random op draws no key when this attribute is true (is_test)
    data_dependent: str | None = None  # why the op is refused and the way round it (no lowering on purpose)
    inplace: bool = False  # these properties hold for the in-place twin name + "_" as well

    @property
    def random(self) -> bool:
        return False


DEFAULT = Properties()


@dataclass(frozen=True)
class Lowering(Properties):
    name: str = ""
    fn: Callable | None = None
    kind: str = "plain"  # "plain" | "random" | "control"
    accepted: frozenset[str] = frozenset()  # attribute names the function takes
    required: frozenset[str] = frozenset()  # attribute names without a default
    ignored: frozenset[str] = frozenset()  # attributes known to carry no meaning for XLA

    @property
    def random(self) -> bool:
        """Whether the op draws random numbers (it takes a PRNG key)."""
        return self.kind == "random"

    def attr_problems(self, attrs) -> list[str]:
        """What is wrong with an op's attributes, as short sentences (empty when fine)."""
        given = set(attrs) - self.ignored
        problems = [f"unexpected attribute {a!r}={attrs[a]!r}" for a in sorted(given - self.accepted)]
        problems += [f"missing attribute {a!r}" for a in sorted(self.required - given)]
        return problems

    def kwargs(self, attrs) -> dict:
        return {k: v for k, v in attrs.items() if k not in self.ignored}


@dataclass(frozen=True)
class Unlowered(Properties):
    """An op with properties and no lowering: refused on purpose (data_dependent), or named by a list
    Paddle keeps (AMP) without paddle_xla lowering it yet."""

    name: str = ""
    where: str = ""  # the module that declared it


REGISTRY: dict[str, Lowering] = {}
UNLOWERED: dict[str, Unlowered] = {}


def _check_classes(names, amp, layout) -> None:
    if amp not in AMP_CLASSES:
        raise ValueError(f"{names}: amp={amp!r} is not one of {AMP_CLASSES}")
    if layout not in LAYOUT_CLASSES:
        raise ValueError(f"{names}: layout={layout!r} is not one of {LAYOUT_CLASSES}")


def _check_names(names, where, inplace) -> None:
    for name in names:
        if name in REGISTRY:
            raise RuntimeError(f"{name} is lowered twice ({REGISTRY[name].fn.__module__} and {where})")
        if name in UNLOWERED:
            raise RuntimeError(
                f"{name} is declared without a lowering in {UNLOWERED[name].where}; "
                f"move that declaration onto its lowering in {where}"
            )
        if inplace and (name + "_" in REGISTRY or name + "_" in UNLOWERED):
            raise RuntimeError(f"{name} declares inplace=True, but {name}_ has its own entry")
        twin = REGISTRY.get(name[:-1]) or UNLOWERED.get(name[:-1]) if name.endswith("_") else None
        if twin is not None and twin.inplace:
            raise RuntimeError(f"{name[:-1]} declares inplace=True, so {name} has its own entry already")


def lowering(
    *names: str,
    kind: str = "plain",
    ignore: tuple[str, ...] = (),
    amp: str = "gray",
    layout: str | None = None,
    draws_unless: str | None = None,
    inplace: bool = False,
):
    """Register `fn` as the lowering of each Paddle op in `names`, with the op's properties.

    `ignore` lists attributes that only steer Paddle's own kernels (e.g. `use_cudnn`). `amp`: the op's
    Paddle AMP O1 class; `layout`: its channels-last class (LAYOUT_CLASSES); `draws_unless`: for a
    random op, an attribute that, when true, makes it draw nothing (dropout's is_test); `inplace`: the
    properties hold for the in-place twin `name_` (which has no entry and runs this lowering) too."""
    _check_classes(names, amp, layout)
    if draws_unless is not None and kind != "random":
        raise ValueError(f"{names}: draws_unless is for kind='random' lowerings")

    def register(fn):
        _check_names(names, fn.__module__, inplace)
        params = inspect.signature(fn).parameters.values()
        kw = [p for p in params if p.kind is p.KEYWORD_ONLY]
        accepted = frozenset(p.name for p in kw)
        required = frozenset(p.name for p in kw if p.default is p.empty)
        for name in names:
            REGISTRY[name] = Lowering(
                amp=amp,
                layout=layout,
                draws_unless=draws_unless,
                inplace=inplace,
                name=name,
                fn=fn,
                kind=kind,
                accepted=accepted,
                required=required,
                ignored=frozenset(ignore),
            )
        return fn

    return register


def declare(*names: str, where: str, amp: str = "gray", data_dependent: str | None = None) -> None:
    """Declare ops that have no lowering: refused on purpose (`data_dependent`: the reason and the way
    round it), or in one of Paddle's AMP lists without a lowering here yet (`amp`)."""
    _check_classes(names, amp, None)
    _check_names(names, where, False)
    for name in names:
        UNLOWERED[name] = Unlowered(amp=amp, data_dependent=data_dependent, name=name, where=where)


def declared() -> dict[str, Properties]:
    """Every op with a declaration, lowered or not, by name."""
    return {**UNLOWERED, **REGISTRY}


def properties(name: str) -> Properties:
    """The properties of op `name`: its own entry's, its functional twin's when it is an in-place
    variant the twin declares (inplace=True), else DEFAULT."""
    entry = REGISTRY.get(name) or UNLOWERED.get(name)
    if entry is None and name.endswith("_"):
        twin = REGISTRY.get(name[:-1]) or UNLOWERED.get(name[:-1])
        entry = twin if twin is not None and twin.inplace else None
    return DEFAULT if entry is None else entry


def ops_where(**wanted) -> frozenset[str]:
    """The op names whose properties equal `wanted` (e.g. ops_where(amp="white")), in-place twins included."""
    names = set()
    for name, entry in declared().items():
        if all(getattr(entry, k) == v for k, v in wanted.items()):
            names.add(name)
            if entry.inplace:
                names.add(name + "_")
    return frozenset(names)


# NOTE: paddle_xla's own ops: in programs it derives (decode_cache.py) or layers it captures whole (layer_ops.py)
OWN = "paddle_xla."


def supported_ops() -> list[str]:
    """The Paddle op names paddle_xla can lower, sorted (paddle_xla's own ops are not Paddle's)."""
    return sorted(n for n in REGISTRY if not n.startswith(OWN))
