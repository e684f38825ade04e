"""Atomic file writes and weight files. A failure never leaves a half-written file behind."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

import numpy as np

from .errors import ModelLoadError


def atomic_write(path: str, data: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over `path`."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        # NOTE: mkstemp creates 0600 files; give the result the usual permissions so a serving
        # account can read an artifact another user exported.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_weights(path: str, weights: Mapping[str, np.ndarray]) -> None:
    from safetensors.numpy import save

    arrays = {k: np.ascontiguousarray(np.asarray(v)) for k, v in weights.items()}
    atomic_write(path, save(arrays))


def load_weights(path: str) -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ModelLoadError(f"No weights file at {path!r}.") from None
    try:
        return dict(load(data))
    except Exception as e:  # safetensors raises its own error types for truncation / bad headers
        raise ModelLoadError(f"The weights file {path!r} is truncated or corrupt ({e}).") from None
