"""Paddle-free artifacts (`*.pxa`): written where Paddle captured the model, run wherever JAX runs.

container.py          the .pxa zip: members with their sha256, the manifest (one writer for both kinds)
writer.py             px.export: a compiled model (or a train step, via train_writer.py) -> .pxa
jax_export.py         jax.export over a Graph's feeds: symbolic None dimensions or example shapes
choice.py             run the exported executable here, or re-lower the Graph, and why
reader.py             paddle_xla.artifact.load -> Artifact, runnable without Paddle
train_writer.py       a train step exported with its whole state
train_reader.py       TrainArtifact: that step continued anywhere, with TrainStep's numbers
generator_writer.py   a px.Generator as a generator artifact (its programs, Geometry, tokenizer)
generator_reader.py   GeneratorArtifact: that generator run without Paddle, through BatchEngine
synthetic_weights.py  big weights drawn on load instead of stored (benchmarks on another machine)
"""

from .reader import Artifact, load  # noqa: F401
