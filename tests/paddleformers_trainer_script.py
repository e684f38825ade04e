"""Run by tests/test_paddleformers_trainer.py under paddle.distributed.launch, in each of 2 processes (one
virtual CPU device each): a PaddleFormers training script with paddle_xla's Trainer swapped in, unchanged
otherwise. Process 0 writes the logged losses and the final weights to argv[1]; argv[3], if given, is a JSON
object of further TrainingArguments."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax
from test_paddleformers_trainer import _train

assert jax.process_count() == 2, jax.process_count()
extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
losses, _, weights, trainer = _train("px", sys.argv[2], max_steps=6, save_steps=3, **extra)
if jax.process_index() == 0:
    with open(sys.argv[1], "w") as f:
        json.dump(
            {
                "losses": losses,
                "strategy": trainer.px_strategy.to_dict(),
                "weights": {k: v.tolist() for k, v in weights.items()},
            },
            f,
        )
