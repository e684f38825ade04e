"""paddle_xla: PaddlePaddle models on any XLA device, with no change to the model's code."""
from .api import XlaModel, check, compile, load_inference_model  # noqa: F401
from .errors import (CaptureError, CheckpointError, FeedError, LoweringError, ModelLoadError,  # noqa: F401
                     PaddleXlaError, StrategyError, TrainingError, UnsupportedOpsError)
from .graph import Graph  # noqa: F401
from .ops.registry import supported_ops  # noqa: F401

__version__ = "0.1.0"
