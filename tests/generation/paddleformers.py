"""PaddleFormers, the reference for generation, from the side folder `make test` installs it into.

It never enters the project's venv (its pins break JAX): tools/zoo.py installs it --no-deps into .zoo/."""
import importlib
import os
import sys

ZOO = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".zoo")


def module(name: str):
    """paddleformers.<name>, imported from .zoo/ (an error saying how to install it if it is not there)."""
    if not os.path.isdir(os.path.join(ZOO, "paddleformers")):
        raise RuntimeError(f"PaddleFormers is not installed in {ZOO}: run `make test` (or tools/zoo.py --install)")
    if ZOO not in sys.path:
        sys.path.append(ZOO)          # NOTE: appended: the venv's own numpy and jax stay first
    return importlib.import_module(f"paddleformers.{name}")
