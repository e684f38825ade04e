"""Training state as the engine keeps it (packed per stage, sharded over the mesh), seen from the
host as plain {name: array} mappings.

`PackedView` is a read-only Mapping whose values are the natural NumPy arrays, unpacked (and so
gathered from the devices) on first access. It is also a pytree with dict keys, so checkpoint code
that flattens `state.params` by path sees exactly what a plain dict would give; unflattening gives a
plain dict, which the engine packs again on its next call."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax

from ..errors import TrainingError
from .mesh import to_host
from .pack import Packing


class PackedView(Mapping):
    def __init__(
        self, arrays: Mapping[str, jax.Array], layouts: Sequence[Packing], extra: Mapping[str, Any], owner: object
    ):
        self.arrays = dict(arrays)  # dtype -> global [stages, width] array (or name -> array: Natural)
        self.layouts = tuple(layouts)
        self.packed = all(isinstance(lay, Packing) for lay in self.layouts)
        self.extra = dict(extra)  # replicated entries (shared weights and their state)
        self.owner = owner  # the engine that packed it
        self._natural: dict | None = None
        self._keys = sorted({*(k for lay in self.layouts for k in lay.names()), *self.extra})

    def natural(self) -> dict[str, Any]:
        if self._natural is None:
            _check_alive(self)
            out: dict[str, Any] = {}
            if self.packed:
                host = {dt: to_host(a) for dt, a in self.arrays.items()}
                for s, lay in enumerate(self.layouts):
                    out.update(lay.unpack({dt: h[s] for dt, h in host.items()}))
            else:
                out.update(jax.tree.map(to_host, self.arrays))
            out.update(jax.tree.map(to_host, self.extra))
            self._natural = out
        return self._natural

    def __getitem__(self, name):
        return self.natural()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"PackedView({len(self)} entries over {len(self.layouts)} stage(s))"


def _check_alive(view: PackedView) -> None:
    # NOTE: the engine donates its state to the next step (one copy of the weights on the devices), so
    # a view read only after a later step finds its buffers gone; say so instead of JAX's "deleted".
    if any(getattr(a, "is_deleted", lambda: False)() for a in jax.tree.leaves((view.arrays, view.extra))):
        raise TrainingError(
            "This view of the training state is from before a later step, which took over its "
            "device buffers (they are donated, so the weights live on the devices once). Read what "
            "you need (step.weights(), step.state.params[name]) before calling the step again."
        )


def _flatten(view: PackedView):
    keys = list(view)
    return [(jax.tree_util.DictKey(k), view[k]) for k in keys], tuple(keys)


def _unflatten(keys, children):
    return dict(zip(keys, children))


jax.tree_util.register_pytree_with_keys(PackedView, _flatten, _unflatten)
