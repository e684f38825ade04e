"""paddle_xla: PaddlePaddle models on any XLA device, with no change to the model's code.

The Paddle-facing names (compile, check, train_step, Model, ...) load on first use, so that the
Paddle-free parts (paddle_xla.artifact, graph, lowering, ops, train, parallel, runtime) import where Paddle is
not installed."""

from importlib import import_module as _import_module
from typing import Any as _Any

from .quiet import quiet_library_noise as _quiet_library_noise

_quiet_library_noise()  # NOTE: first, so that Paddle's glog level is set if Paddle is not loaded yet

from .errors import (  # noqa: F401
    CaptureError,
    CheckFailedError,
    CheckpointError,
    DistributedError,
    FeedError,
    GenerationError,
    LoweringError,
    ModelLoadError,
    PaddleXlaError,
    StrategyError,
    TrainingError,
    UnsupportedOpsError,
)
from .graph import Graph  # noqa: F401
from .strategy import LossScale, Strategy  # noqa: F401

__version__ = "0.1.0"

from .runtime.host_heap import keep_freed_memory as _keep_freed_memory

# NOTE: importing changes no JAX configuration and starts no backend (tests/test_import_effects.py): the
# compile cache comes on at paddle_xla's first compile (runtime/compile_cache.ensure_compile_cache).
# The one process-wide setting made here is glibc's malloc policy, and only on XLA:CPU: it must come
# before XLA starts its threads, which a user's own JAX call can do before paddle_xla's first compile
# (host_heap.py says why, and what it costs; PADDLE_XLA_KEEP_HEAP=0 leaves glibc alone). It sets no
# environment variable.
_keep_freed_memory()

from .parallel.join import join_from_environment as _join_from_environment

# NOTE: before the script can start a JAX backend: a process whose launcher (paddle.distributed.launch,
# srun, mpirun, torchrun, paddle-xla launch) names several ranks joins them here, or stops with the reason.
# A lone process (no launcher's variables, PADDLE_XLA_DISTRIBUTED unset) returns at once: no JAX call,
# no environment change.
_join_from_environment()

# public name -> the module that defines it (imported lazily: these modules import paddle)
_LAZY = {
    "compile": "api.inference",
    "check": "api.inference",
    "load_inference_model": "api.inference",
    "XlaModel": "api.inference",
    "train_step": "api.training",
    "TrainStep": "api.training",
    "supported_ops": "ops.registry",
    "stage": "capture.stage_markers",
    "plan": "api.planning",
    "Model": "api.hapi",
    "load_artifact": ("artifact.reader", "load"),
    "export": "artifact.writer",
    "Generator": "api.generator",
    "generate": "api.generator",
}

__all__ = sorted(
    [
        *_LAZY,
        "Graph",
        "Strategy",
        "LossScale",
        "PaddleXlaError",
        "CaptureError",
        "CheckFailedError",
        "CheckpointError",
        "DistributedError",
        "GenerationError",
        "FeedError",
        "LoweringError",
        "ModelLoadError",
        "StrategyError",
        "TrainingError",
        "UnsupportedOpsError",
    ]
)


def __getattr__(name: str) -> _Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'paddle_xla' has no attribute {name!r}")
    module, attr = target if isinstance(target, tuple) else (target, name)
    value = getattr(_import_module(f".{module}", __name__), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
