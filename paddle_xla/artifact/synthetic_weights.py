"""Artifacts whose big weights are drawn on load instead of stored: ship a model's Graph to a machine
and benchmark it there without copying its weights (BERT-Base: 440 MB of float32).

`export(..., synthetic_weights={"std": 0.02, "seed": 0})` stores only the weights of fewer than
`min_ndim` (default 2) dimensions, i.e. biases and LayerNorm scales, whose init is not random, and
records the rest in the manifest by name, shape and dtype. The loader draws each of those as
normal(0, std), Paddle's usual BERT/transformer init, from the seed. The numbers are not the
exporter's: such an artifact measures speed, not a trained model. Paddle-free."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ExportError, ModelLoadError

DEFAULTS = {"std": 0.02, "seed": 0, "min_ndim": 2}


def leave_out(weights: Mapping[str, np.ndarray], spec: Mapping | None) -> tuple[dict, dict | None]:
    """(weights to store, the manifest entry) for `spec` (None: store everything)."""
    if spec is None:
        return dict(weights), None
    unknown = set(spec) - set(DEFAULTS)
    if unknown:
        raise ExportError(f"synthetic_weights takes {sorted(DEFAULTS)}, not {sorted(unknown)}.")
    spec = {**DEFAULTS, **spec}
    drawn = {
        k: v
        for k, v in weights.items()
        if np.ndim(v) >= spec["min_ndim"] and np.issubdtype(np.asarray(v).dtype, np.floating)
    }
    entry = {
        **spec,
        "weights": {
            k: {"shape": list(np.shape(v)), "dtype": str(np.asarray(v).dtype)} for k, v in sorted(drawn.items())
        },
    }
    return {k: v for k, v in weights.items() if k not in drawn}, entry


def fill(manifest: Mapping, stored: Mapping[str, Any]) -> dict[str, Any]:
    """`stored` plus the weights the manifest says to draw (on the default device)."""
    entry = manifest.get("synthetic_weights")
    if not entry:
        return dict(stored)
    try:
        key, std = jax.random.key(int(entry["seed"])), float(entry["std"])
        specs = entry["weights"]
    except (KeyError, TypeError, ValueError) as e:
        raise ModelLoadError(f"The manifest's synthetic_weights entry is corrupt ({e}); export it again.") from None
    out = dict(stored)
    for i, (name, spec) in enumerate(specs.items()):
        # NOTE: one key per weight by its index in the sorted names, so each weight is the same
        # whichever others there are, and drawing runs on the accelerator (no host copy).
        x = jax.random.normal(jax.random.fold_in(key, i), tuple(spec["shape"]), jnp.float32) * std
        out[name] = x.astype(spec["dtype"])
    return out
