"""Binary arithmetic with NumPy-style broadcasting (Paddle's default axis=-1)."""
from __future__ import annotations

from .registry import lowering
from .util import xp


def _binary(name, fn_name):
    @lowering(name)
    def binary(x, y):
        return getattr(xp(x, y), fn_name)(x, y)
    binary.__name__ = fn_name
    return binary


for _op, _fn in [("pd_op.add", "add"), ("pd_op.subtract", "subtract"), ("pd_op.multiply", "multiply")]:
    _binary(_op, _fn)
