"""Paddle-free artifacts (`*.pxa`): written where Paddle captured the model, run wherever JAX runs.

  container.py          the .pxa zip: members with their sha256, the manifest, the format versions
  writer.py             px.export: a compiled model (or a train step) -> .pxa
  jax_export.py         jax.export over a Graph's feeds: symbolic None dimensions or example shapes
  reader.py             paddle_xla.artifact.load -> Artifact, runnable without Paddle
  train_artifact.py     a train step exported with its whole state, continued anywhere
  synthetic_weights.py  big weights drawn on load instead of stored (benchmarks on another machine)
"""
from .reader import Artifact, load  # noqa: F401
