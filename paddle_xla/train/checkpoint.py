"""Checkpoints of the full training state in one safetensors file, written atomically.

Arrays: params, buffers, optimizer state (flattened by pytree path), the RNG key. Metadata: format
version, step, the model's fingerprint, the LR schedule's state. Loading checks every name and shape
against the running model, so a checkpoint of another model is named, not half-loaded."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from ..errors import CheckpointError
from ..files import atomic_write
from .step import TrainState

FORMAT = "paddle_xla.checkpoint/1"


def fingerprint(param_shapes: dict[str, tuple]) -> str:
    text = json.dumps(sorted((k, list(v)) for k, v in param_shapes.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _flat(prefix: str, tree) -> dict[str, np.ndarray]:
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {prefix + jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}


def _renamed(tree, names: Mapping[str, str] | None):
    """Key a {param name: ...} dict by stable names: Paddle's param names (linear_17.w_0) depend on how
    many layers the process built before, so checkpoints use the Layer's state_dict keys."""
    if not names or not isinstance(tree, Mapping):
        return tree
    return {names.get(k, k): v for k, v in tree.items()}


def to_arrays(state: TrainState, names: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
    arrays = {
        **_flat("params", _renamed(state.params, names)),
        **_flat("buffers", _renamed(state.buffers, names)),
        **_flat("opt", _renamed(state.opt_state, names)),
    }
    arrays["rng"] = np.asarray(jax.random.key_data(state.key))
    return arrays


def save(
    path: str, state: TrainState, fp: str, extra: dict[str, Any] | None = None, names: Mapping[str, str] | None = None
) -> None:
    from safetensors.numpy import save as st_save

    meta = {"format": FORMAT, "step": str(state.step), "fingerprint": fp, "extra": json.dumps(extra or {})}
    atomic_write(path, st_save(to_arrays(state, names), metadata=meta))


def load(
    path: str, template: TrainState, fp: str, names: Mapping[str, str] | None = None
) -> tuple[TrainState, dict[str, Any]]:
    """Restore into the structure of `template` (a freshly initialised state of the same model)."""
    arrays, meta = _read(path)
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path!r} is not a paddle_xla checkpoint (format {meta.get('format')!r}).")
    want = to_arrays(template, names)
    _check_names(path, arrays, want, meta.get("fingerprint") != fp)
    restored = {}
    back = {v: k for k, v in (names or {}).items()}
    for prefix, tree in (("params", template.params), ("buffers", template.buffers), ("opt", template.opt_state)):
        leaves, treedef = jax.tree_util.tree_flatten_with_path(_renamed(tree, names))
        values = [jax.numpy.asarray(arrays[prefix + jax.tree_util.keystr(p)]) for p, _ in leaves]
        restored[prefix] = _renamed(jax.tree_util.tree_unflatten(treedef, values), back)
    key = jax.random.wrap_key_data(arrays["rng"])
    state = TrainState(restored["params"], restored["buffers"], restored["opt"], int(meta["step"]), key)
    return state, json.loads(meta.get("extra", "{}"))


def _read(path: str):
    from safetensors import safe_open

    try:
        with safe_open(path, framework="numpy") as f:
            meta = f.metadata() or {}
            arrays = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is no dict: keys() lists it)
    except FileNotFoundError:
        raise CheckpointError(f"No checkpoint at {path!r}.") from None
    except Exception as e:  # safetensors raises its own errors on truncated or corrupt files
        raise CheckpointError(
            f"The checkpoint {path!r} is truncated or corrupt ({e}); use an earlier checkpoint."
        ) from None
    return arrays, meta


def _check_names(path, got: dict, want: dict, other_model: bool) -> None:
    missing = sorted(set(want) - set(got))
    unexpected = sorted(set(got) - set(want))
    shapes = sorted(k for k in set(got) & set(want) if got[k].shape != want[k].shape)
    if missing or unexpected or shapes:
        lines = [
            f"The checkpoint {path!r} does not fit this model"
            + (" (it was saved from a different model)" if other_model else "")
            + ":"
        ]
        if missing:
            lines.append(f"  missing in the checkpoint: {_short(missing)}")
        if unexpected:
            lines.append(f"  in the checkpoint but not in the model: {_short(unexpected)}")
        if shapes:
            lines.append("  shape differs: " + ", ".join(f"{k} {got[k].shape} vs {want[k].shape}" for k in shapes[:8]))
        raise CheckpointError("\n".join(lines))


def _short(names: list[str], n: int = 8) -> str:
    return ", ".join(names[:n]) + (f" ... and {len(names) - n} more" if len(names) > n else "")
