"""Pack unlike pytrees into like arrays: one flat vector per dtype.

Pipeline stages need not be alike (embeddings first, a head last), yet an SPMD program gives every
device arrays of one shape. So each stage's weights, buffers and optimizer state are packed into
one flat vector per dtype, padded to the longest stage's, and stacked over the stage axis: device
row s holds stage s's vector only. Activations sent between stages are packed the same way."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class Layout:
    """Where each leaf of a pytree lives in the per-dtype flat vectors."""
    tree: Any
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    offsets: tuple[int, ...]
    sizes: Mapping[str, int]          # dtype -> elements used

    @staticmethod
    def of(template) -> "Layout":
        leaves, tree = jax.tree.flatten(template)
        shapes = tuple(tuple(np.shape(x)) for x in leaves)
        dtypes = tuple(np.dtype(x.dtype).name for x in leaves)
        sizes: dict[str, int] = {}
        offsets = []
        for shape, dt in zip(shapes, dtypes):
            offsets.append(sizes.get(dt, 0))
            sizes[dt] = sizes.get(dt, 0) + int(np.prod(shape))
        return Layout(tree, shapes, dtypes, tuple(offsets), sizes)

    def pack(self, value, widths: Mapping[str, int], xp=jnp) -> dict[str, Any]:
        """dtype -> flat vector of widths[dtype] elements (zero padded)."""
        leaves = jax.tree.leaves(value)
        parts: dict[str, list] = {dt: [] for dt in widths}
        for leaf, dt in zip(leaves, self.dtypes):
            parts[dt].append(xp.reshape(xp.asarray(leaf).astype(dt), (-1,)))
        out = {}
        for dt, width in widths.items():
            pad = width - self.sizes.get(dt, 0)
            chunks = parts[dt] + ([xp.zeros((pad,), dt)] if pad else [])
            out[dt] = xp.concatenate(chunks) if len(chunks) > 1 else chunks[0] if chunks else xp.zeros((0,), dt)
        return out

    def unpack(self, flats: Mapping[str, Any]):
        leaves = [flats[dt][off:off + int(np.prod(shape))].reshape(shape)
                  for shape, dt, off in zip(self.shapes, self.dtypes, self.offsets)]
        return jax.tree.unflatten(self.tree, leaves)

    def names(self) -> list[str]:
        """The top-level keys of the packed dict."""
        return list(jax.tree.unflatten(self.tree, [0] * len(self.shapes)))


@dataclass(frozen=True)
class Natural:
    """No packing: the dict stays as it is. One stage has nothing unlike to pack, and packing costs
    copies (on CPU a packed one-device step ran ~45% slower than the plain one)."""
    keys: tuple[str, ...]
    sizes: Mapping[str, int] = None

    def pack(self, value, widths=None, xp=jnp):
        return {k: value[k] for k in self.keys}

    def unpack(self, flats):
        return {k: flats[k] for k in self.keys}

    def names(self) -> list[str]:
        return list(self.keys)


def widths(layouts: Sequence[Layout], multiple: int = 1) -> dict[str, int]:
    """Per dtype, the longest of the layouts, rounded up to `multiple` (for sharding over replicas)."""
    out: dict[str, int] = {}
    for lay in layouts:
        for dt, n in (lay.sizes or {}).items():
            out[dt] = max(out.get(dt, 0), n)
    return {dt: -(-n // multiple) * multiple if n else multiple for dt, n in sorted(out.items())}


def stack(layouts: Sequence[Layout], values: Sequence, width: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Host-side: each stage's value packed, stacked into dtype -> [stages, width] NumPy arrays."""
    rows = [lay.pack(jax.tree.map(np.asarray, v), width, xp=np) for lay, v in zip(layouts, values)]
    return {dt: np.stack([r[dt] for r in rows]) for dt in width}
