"""Other libraries' training loops, driving paddle_xla: `integrations.paddleformers` (PaddleFormers' Trainer).
Each is imported by name and needs that library installed; nothing here is imported by `paddle_xla` itself.
paddleformers.py imports paddle; trainer_args.py and trainer_batches.py are Paddle-free."""
