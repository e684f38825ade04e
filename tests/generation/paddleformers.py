"""PaddleFormers, the reference for generation, installed in the venv as a user installs it.

`make test` runs `paddle-xla install paddleformers` (a pinned list, pip --no-deps: PaddleFormers' own pins
would pull numpy 1.26, which breaks JAX)."""

import dataclasses
import importlib
import importlib.util
import sys
import types


def module(name: str):
    """paddleformers.<name> (an error saying how to install it if it is not there)."""
    if importlib.util.find_spec("paddleformers") is None:
        raise RuntimeError(
            "PaddleFormers is not installed in this environment: run `paddle-xla install "
            "paddleformers` (`make test` does)"
        )
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


def _stub_paddlefleet_ops() -> None:
    """PaddleFormers' MoE modules import `paddlefleet_ops` (GPU-only DeepEP kernels) at import time to ask
    whether DeepEP is there; without it a stand-in answers no, and nothing else of it is ever reached."""
    if "paddlefleet_ops" not in sys.modules and importlib.util.find_spec("paddlefleet_ops") is None:
        stub = types.ModuleType("paddlefleet_ops")
        stub.is_deep_ep_available = lambda: False
        sys.modules["paddlefleet_ops"] = stub


def moe(family: str):
    """PaddleFormers 1.2's modeling module of a MoE family ("qwen2_moe", "qwen3_moe"), importable on a CPU
    host (the Paddle-native classes are its *ForCausalLMDeprecated ones, as qwen2()'s)."""
    qwen2()
    _stub_paddlefleet_ops()
    return importlib.import_module(f"paddleformers.transformers.{family}.modeling")


def moe_config(family: str):
    """The configuration module beside moe(family)'s modeling module."""
    moe(family)
    return importlib.import_module(f"paddleformers.transformers.{family}.configuration")
