"""paddle_xla: PaddlePaddle models on any XLA device, with no change to the model's code.

The Paddle-facing names (compile, check, train_step, Model, ...) load on first use, so that the
Paddle-free parts (paddle_xla.artifact, graph, lowering, ops, train, parallel, runtime) import where Paddle is
not installed."""
from importlib import import_module as _import_module

from .quiet import quiet_library_noise as _quiet_library_noise

_quiet_library_noise()   # NOTE: first, so that Paddle's glog level is set if Paddle is not loaded yet

from .errors import (CaptureError, CheckFailedError, CheckpointError, DistributedError, FeedError,  # noqa: F401
                     GenerationError,
                     LoweringError, ModelLoadError, PaddleXlaError, StrategyError, TrainingError,
                     UnsupportedOpsError)
from .graph import Graph  # noqa: F401
from .strategy import LossScale, Strategy  # noqa: F401

__version__ = "0.1.0"

from .runtime.compile_cache import enable_compile_cache as _enable_compile_cache  # noqa: E402
from .runtime.host_heap import keep_freed_memory as _keep_freed_memory  # noqa: E402

_enable_compile_cache()
# NOTE: before XLA starts its threads (host_heap.py says why, and what it costs)
_keep_freed_memory()

from .parallel.join import join_from_environment as _join_from_environment  # noqa: E402

# NOTE: before the script can start a JAX backend: a process whose launcher (paddle.distributed.launch,
# srun, mpirun, torchrun, paddle-xla launch) names several ranks joins them here, or stops with the reason
_join_from_environment()

# public name -> the module that defines it (imported lazily: these modules import paddle)
_LAZY = {
    "compile": "api.inference", "check": "api.inference", "load_inference_model": "api.inference",
    "XlaModel": "api.inference",
    "train_step": "api.training", "TrainStep": "api.training",
    "supported_ops": "ops.registry",
    "stage": "capture.stage_markers",
    "plan": "api.planning",
    "Model": "api.hapi",
    "load_artifact": ("artifact.reader", "load"),
    "export": "artifact.writer",
    "Generator": "api.generator", "generate": "api.generator",
}

__all__ = sorted([*_LAZY, "Graph", "Strategy", "LossScale", "PaddleXlaError", "CaptureError",
                  "CheckFailedError", "CheckpointError", "DistributedError", "GenerationError",
                  "FeedError", "LoweringError", "ModelLoadError", "StrategyError", "TrainingError",
                  "UnsupportedOpsError"])


def __getattr__(name):
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'paddle_xla' has no attribute {name!r}")
    module, attr = target if isinstance(target, tuple) else (target, name)
    value = getattr(_import_module(f".{module}", __name__), attr)
    globals()[name] = value
    return value


def __dir__():
    return __all__

