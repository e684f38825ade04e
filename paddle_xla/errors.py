"""paddle_xla's error classes. Each message names the thing that is wrong and the fix."""

from __future__ import annotations

from typing import Protocol


class _MissingOps(Protocol):
    """What UnsupportedOpsError reads of a report (lowering/interpreter.py's CoverageReport), named here so that
    this ground-floor module imports nothing above it, not even for types."""

    def describe_missing(self) -> str: ...


class PaddleXlaError(Exception):
    """Base class of every error paddle_xla raises on purpose."""


class CaptureError(PaddleXlaError):
    """Paddle could not turn the model into a program, or the program could not be read."""


class ModelLoadError(PaddleXlaError):
    """A saved model, Graph or artifact is missing, unreadable or corrupt."""


class FeedError(PaddleXlaError):
    """An input is missing, or has the wrong shape, rank or dtype."""


class UnsupportedOpsError(PaddleXlaError):
    """The program uses ops paddle_xla cannot lower. Lists all of them at once."""

    def __init__(self, report: _MissingOps) -> None:
        self.report = report
        super().__init__(report.describe_missing())


class LoweringError(PaddleXlaError):
    """A lowering rejected an op's attributes or inputs."""


class StrategyError(PaddleXlaError):
    """A Strategy is invalid for this program or these devices."""


class CheckpointError(PaddleXlaError):
    """A checkpoint is unreadable, truncated, or belongs to another model."""


class TrainingError(PaddleXlaError):
    """A training step failed: a non-finite loss, a bad label, ..."""


class CheckFailedError(PaddleXlaError):
    """A check the program itself makes (Paddle's assert) is false for these inputs."""


class ExportError(LoweringError):
    """The program could not be serialized for a platform, or export() got bad arguments."""


class GenerationError(PaddleXlaError):
    """A generate call asked for something the generator cannot do: a bad argument or length."""


class DistributedError(PaddleXlaError):
    """A process of a multi-process job cannot join its group, or lost a member of it."""
