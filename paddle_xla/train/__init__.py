"""Training: Paddle's optimizers, learning-rate schedules and gradient clipping, in pure JAX.

  optim.py       Paddle's optimizers as pure update rules (OptimizerConfig), with Paddle's exact numbers
  lr.py          paddle.optimizer.lr's schedules
  clip.py        paddle.nn.ClipGradBy*
  precision.py   fp16 loss scaling (paddle.amp.GradScaler)
  reduction.py   whether a program's loss is a mean or a sum over its batch
  step.py        the training step as one pure function (forward, loss, grads, update)
  checkpoint.py  the full training state in one safetensors file, written atomically

Nothing under `paddle_xla.train` imports paddle; `paddle_xla.interop.paddle_optimizer` reads a live
Paddle optimizer into these configs and writes their state back.
"""
