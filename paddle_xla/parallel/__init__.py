"""Spreading one training step over devices, as a Strategy asks. Paddle-free.

  mesh.py       the ("replica", "stage", "sequence", "tensor") device mesh; placing host values on it, reading them back
  graphs.py     the Graph as data flow: what each op reads, weight-free ops, repeated layers
  rules.py      stage rules on layer paths ("encoder.layers.0-3": 1)
  tensor_plan.py  what the tensor axis splits: rules on layer paths, Paddle's plan objects, or "auto"
  placement.py  op -> stage, by px.stage markers, rules, or balance ("auto")
  profile.py    abstract values of a Graph for one input shape; a FLOP count per op
  report.py     stand-in costs for balancing, and the printed plan
  stages.py     a placement made runnable for one micro-batch shape: per-stage programs and sends
  program.py    running a piece of a Graph, optionally rematerialising each layer
  pack.py       unlike trees packed into like arrays (one flat vector per dtype; split weights as tensor slices)
  tensor_interpreter.py  the stages' interpreter with a tensor axis: split operands gathered whole first
  sequence_interpreter.py  the interpreter of a sequence-split step: rows kept split where a reshape merges them
  ring_rewrite.py  under Strategy(sequence=N), attention rewritten into the paddle_xla.ring_attention op
  context.py    what the per-device functions share; collectives that vanish over size-one axes
  data.py       one stage: data parallelism and gradient accumulation
  pipeline.py   several stages: the GPipe schedule (and why SPMD, not host-driven MPMD)
  pipeline_1f1b.py  the 1F1B schedule: forward and backward interleaved, memory flat in micro-batches
  update.py     the optimizer on each stage; global-norm clipping across stages; ZeRO-1
  engine.py     the jitted SPMD pipeline step over the mesh (stages x tensor), steps_per_call steps per call; EngineBase
  sharded.py    the one-stage step: replicas (manual) x tensor (GSPMD), sharding stages 1-3
  state.py      the engine's packed, sharded state seen as plain mappings
  group.py      which process group the launcher's environment names (Paddle's, SLURM, Open MPI, torchrun, ...)
  join.py       joining it at `import paddle_xla`, in bounded time, or stopping with the reason
  liveness.py   a lost rank stops every other process at once, naming it
  shares.py     each process feeds its share of the global batch (DistributedBatchSampler's); gathered per step
  launch.py     `paddle-xla launch`: N processes on this host, joined the same way

Numbers: every layout reproduces one device. BatchNorm statistics are per group (replica x
micro-batch) of the batch; see data.py.
"""
