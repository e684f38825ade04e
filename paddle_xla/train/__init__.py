"""Training: Paddle's optimizers, learning-rate schedules and gradient clipping, in pure JAX.

Nothing under `paddle_xla.train` imports paddle; `paddle_xla.interop.optim` reads a live
Paddle optimizer into these configs and writes their state back.
"""
