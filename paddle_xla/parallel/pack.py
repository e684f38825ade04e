"""Pack unlike pytrees into like arrays: one flat vector per dtype.

Pipeline stages need not be alike (embeddings first, a head last), yet an SPMD program gives every
device arrays of one shape. So each stage's weights, buffers and optimizer state are packed into
one flat vector per dtype, padded to the longest stage's, and stacked over the stage axis: device
row s holds stage s's vector only. Activations sent between stages are packed the same way.

With a tensor axis, a weight that the tensor plan splits along dimension d is packed as its T slices:
key "<dtype>|tensor" holds a [T, width] array, row t the flattened slice t, so that sharding that
array's first dimension over "tensor" leaves each device its own slices of every split weight of its
stage (per-parameter shardings cannot survive packing otherwise). Unpacking turns the slices back
into the whole weight along d, a reshape GSPMD keeps local."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

SPLIT = "|tensor"


def dtype_of(key: str) -> str:
    """The dtype of a packed key: 'float32' or 'float32|tensor' -> 'float32'."""
    return key.split("|")[0]


def split_dim(shape: tuple, d: int | None, tensor: int) -> int | None:
    """The dimension a weight (or an accumulator of its shape) is split along: the plan's `d` where
    the shape has it and `tensor` divides it, else None (kept whole)."""
    if tensor == 1 or d is None or d >= len(shape) or shape[d] % tensor:
        return None
    return d


def tensor_spec(ndim: int, d: int | None) -> tuple:
    """A whole array's sharding spec: "tensor" on dimension d (none when d is None)."""
    return tuple("tensor" if k == d else None for k in range(ndim))


@dataclass(frozen=True)
class Packing:
    """Where each leaf of a pytree lives in the per-dtype flat vectors."""

    tree: Any
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    offsets: tuple[int, ...]
    sizes: Mapping[str, int]  # key -> elements used (per slice for a split key)
    splits: tuple[int | None, ...] = ()  # per leaf: the tensor-split dimension, or None
    tensor: int = 1
    constrain: Callable | None = None  # (array, spec tuple) -> array: a sharding constraint, inside jit

    @staticmethod
    def of(
        template, split_dims: Mapping[str, int] | None = None, tensor: int = 1, constrain: Callable | None = None
    ) -> Packing:
        """`split_dims`: top-level name -> dimension the tensor axis splits (leaves of that name whose
        rank reaches it and whose size there `tensor` divides; others, e.g. a scalar accumulator, stay whole)."""
        paths, tree = jax.tree_util.tree_flatten_with_path(template)
        leaves = [leaf for _, leaf in paths]
        shapes = tuple(tuple(np.shape(x)) for x in leaves)
        dtypes = tuple(np.dtype(x.dtype).name for x in leaves)
        splits = tuple(_split_of(path, shape, split_dims or {}, tensor) for (path, _), shape in zip(paths, shapes))
        sizes: dict[str, int] = {}
        offsets = []
        for shape, dt, d in zip(shapes, dtypes, splits):
            key = dt + SPLIT if d is not None else dt
            offsets.append(sizes.get(key, 0))
            sizes[key] = sizes.get(key, 0) + int(np.prod(shape)) // (tensor if d is not None else 1)
        return Packing(tree, shapes, dtypes, tuple(offsets), sizes, splits, tensor, constrain)

    def _key(self, i: int) -> str:
        return self.dtypes[i] + SPLIT if self.splits and self.splits[i] is not None else self.dtypes[i]

    def pack(self, value, widths: Mapping[str, int], xp=jnp) -> dict[str, Any]:
        """key -> flat vector of widths[key] elements (zero padded); [T, width] for a split key."""
        leaves = jax.tree.leaves(value)
        parts: dict[str, list] = {k: [] for k in widths}
        for i, leaf in enumerate(leaves):
            x = xp.asarray(leaf).astype(self.dtypes[i])
            d = self.splits[i] if self.splits else None
            if d is None and xp is not np:
                x = self._keep(x, ())  # NOTE: whole on every tensor device, gathered by group collectives
            parts[self._key(i)].append(xp.reshape(x, (-1,)) if d is None else self._slices(x, d, xp))
        out = {}
        for key, width in widths.items():
            lead = (self.tensor,) if key.endswith(SPLIT) else ()
            pad = width - self.sizes.get(key, 0)
            chunks = parts[key] + ([xp.zeros(lead + (pad,), dtype_of(key))] if pad else [])
            out[key] = (
                xp.concatenate(chunks, axis=-1)
                if len(chunks) > 1
                else chunks[0]
                if chunks
                else xp.zeros(lead + (0,), dtype_of(key))
            )
            if lead and xp is not np:
                out[key] = self._keep(out[key], ("tensor", None))
        return out

    def unpack(self, flats: Mapping[str, Any]):
        leaves = []
        for i, (shape, off) in enumerate(zip(self.shapes, self.offsets)):
            d = self.splits[i] if self.splits else None
            flat = flats[self._key(i)]
            if d is None:
                leaf = flat[off : off + int(np.prod(shape))].reshape(shape)
                leaves.append(self._keep(leaf, ()) if not isinstance(leaf, np.ndarray) else leaf)
            else:
                leaves.append(self._whole(flat[:, off : off + int(np.prod(shape)) // self.tensor], shape, d))
        return jax.tree.unflatten(self.tree, leaves)

    # ---- a split leaf: its T slices along d <-> [T, elements per slice] ----
    def _slices(self, x, d: int, xp):
        T, shape = self.tensor, x.shape
        x = xp.reshape(x, shape[:d] + (T, shape[d] // T) + shape[d + 1 :])
        x = xp.moveaxis(x, d, 0)
        return xp.reshape(x, (T, -1))

    def _whole(self, rows, shape: tuple, d: int):
        T = self.tensor
        xp = np if isinstance(rows, np.ndarray) else jnp
        rows = self._keep(rows, ("tensor", None)) if xp is jnp else rows
        x = xp.reshape(rows, (T,) + shape[:d] + (shape[d] // T,) + shape[d + 1 :])
        x = xp.reshape(xp.moveaxis(x, 0, d), shape)
        return self._keep(x, tensor_spec(len(shape), d)) if xp is jnp else x

    def _keep(self, x, spec: tuple):
        return self.constrain(x, spec) if self.constrain is not None else x

    def names(self) -> list[str]:
        """The top-level keys of the packed dict."""
        return list(jax.tree.unflatten(self.tree, [0] * len(self.shapes)))


def _split_of(path, shape: tuple, split_dims: Mapping[str, int], tensor: int) -> int | None:
    return split_dim(shape, split_dims.get(getattr(path[0], "key", "")), tensor) if path else None


@dataclass(frozen=True)
class Natural:
    """No packing: the dict stays as it is. One stage has nothing unlike to pack, and packing costs
    copies (on CPU a packed one-device step ran ~45% slower than the plain one)."""

    keys: tuple[str, ...]
    sizes: Mapping[str, int] | None = None

    def pack(self, value, widths=None, xp=jnp):
        return {k: value[k] for k in self.keys}

    def unpack(self, flats):
        return {k: flats[k] for k in self.keys}

    def names(self) -> list[str]:
        return list(self.keys)


def widths(layouts: Sequence[Packing], multiple: int = 1) -> dict[str, int]:
    """Per dtype, the longest of the layouts, rounded up to `multiple` (for sharding over replicas)."""
    out: dict[str, int] = {}
    for lay in layouts:
        for dt, n in (lay.sizes or {}).items():
            out[dt] = max(out.get(dt, 0), n)
    return {dt: -(-n // multiple) * multiple if n else multiple for dt, n in sorted(out.items())}


def stack(layouts: Sequence[Packing], values: Sequence, width: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Host-side: each stage's value packed, stacked into key -> [stages, (T,) width] NumPy arrays."""
    rows = [lay.pack(jax.tree.map(np.asarray, v), width, xp=np) for lay, v in zip(layouts, values)]
    return {dt: np.stack([r[dt] for r in rows]) for dt in width}
