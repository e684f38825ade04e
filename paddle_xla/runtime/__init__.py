"""Executables: weights on the device, feeds checked, one executable per input shape. Paddle-free.

compiled.py       CompiledModel: an inference program, compiled per input shape
step_runner.py    the training step under a Strategy: one device, or the SPMD engine of parallel/
executables.py    ExecutableCache: one executable per input signature, compiled once under a lock
feeds.py          what the user feeds, checked against what the Graph expects, before XLA sees it
held.py           HeldWeights: the weights an executable reads in another precision or layout
xla_options.py    XLA compiler options chosen per program and backend
compile_cache.py  JAX's persistent compilation cache, and the progress line for long compiles
host_heap.py      freed host memory kept for reuse (XLA:CPU's per-call buffers)
"""
