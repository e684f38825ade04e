"""PaddleFormers, the reference for generation, from the side folder `make test` installs it into.

It never enters the project's venv (its pins break JAX): tools/zoo.py installs it --no-deps into .zoo/."""
import dataclasses
import importlib
import importlib.util
import os
import sys
import types

ZOO = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".zoo")


def module(name: str):
    """paddleformers.<name>, imported from .zoo/ (an error saying how to install it if it is not there)."""
    if not os.path.isdir(os.path.join(ZOO, "paddleformers")):
        raise RuntimeError(f"PaddleFormers is not installed in {ZOO}: run `make test` (or tools/zoo.py --install)")
    if ZOO not in sys.path:
        sys.path.append(ZOO)          # NOTE: appended: the venv's own numpy and jax stay first
    return importlib.import_module(f"paddleformers.{name}")


def qwen2():
    """PaddleFormers 1.2's qwen2 modeling module. Its Qwen2ForCausalLM builds paddlefleet's GPU model; the
    Paddle-native class is Qwen2ForCausalLMDeprecated. The module imports gpt_provider, which needs the
    GPU-only paddlefleet, for the former alone: without paddlefleet an empty stand-in for that module
    lets it import (Qwen2ForCausalLMDeprecated never reads it)."""
    module("transformers")
    name = "paddleformers.transformers.gpt_provider"
    if importlib.util.find_spec("paddlefleet") is None and name not in sys.modules:
        stub = types.ModuleType(name)
        stub.GPTModelProvider = dataclasses.dataclass(type("GPTModelProvider", (), {}))
        sys.modules[name] = stub
    return importlib.import_module("paddleformers.transformers.qwen2.modeling")
