"""Lowerings by family, one small JAX function per Paddle op. Importing this package registers every one of
them. Paddle-free. registry.py: the registry and each op's declared properties; data_dependent.py: ops
refused on purpose; util.py: helpers; decode_cache.py, grouped_attention.py, ring_attention.py:
paddle_xla's own ops, found only in programs that generation/ and parallel/ rewrite."""

import importlib as _importlib
import pkgutil as _pkgutil

from . import registry  # noqa: F401
from .registry import REGISTRY, lowering, supported_ops  # noqa: F401

# NOTE: every module in this folder that is not a helper registers lowerings on import; loading them
# by listing the folder means a new family file needs no edit here (helpers work on separate files).
for _m in _pkgutil.iter_modules(__path__):
    if _m.name not in ("registry", "util"):
        _importlib.import_module(f"{__name__}.{_m.name}")
