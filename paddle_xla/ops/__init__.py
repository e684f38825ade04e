"""Lowerings by family. Importing this package registers every one of them."""
from . import registry  # noqa: F401
from .registry import REGISTRY, lowering, supported_ops  # noqa: F401

import importlib as _importlib
import pkgutil as _pkgutil

# NOTE: every module in this folder that is not a helper registers lowerings on import; loading them
# by listing the folder means a new family file needs no edit here (helpers work on separate files).
for _m in _pkgutil.iter_modules(__path__):
    if _m.name not in ("registry", "util"):
        _importlib.import_module(f"{__name__}.{_m.name}")
