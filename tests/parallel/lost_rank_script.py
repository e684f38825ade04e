"""Run by test_launchers in each of 2 processes (8 virtual CPU devices each), joined through the
environment alone: trains the MLP with the default Strategy (data parallel over all 16 devices),
checkpointing after every step. argv: checkpoint path, loss-file prefix, steps, and the step after
which rank 1 kills itself with SIGKILL (-1: never). With an existing checkpoint it resumes from it."""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax

import paddle_xla as px
from parallel.helpers import LABEL, batches, loss_fn, own_share, setup

ckpt, out, steps, kill_after = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
assert jax.process_count() == 2 and jax.device_count() == 16, (jax.process_count(), jax.device_count())
net, opt, specs = setup("mlp")
step = px.train_step(net, loss_fn(), opt, specs, LABEL)
if os.path.exists(ckpt):
    step.load_checkpoint(ckpt)
start, losses = step.state.step, {}
for i, (x, y) in enumerate(batches("mlp", steps, 16)):
    if i < start:
        continue
    losses[i] = step(*own_share(x), *own_share(y))
    step.save_checkpoint(ckpt)
    with open(f"{out}.{jax.process_index()}", "w") as f:
        json.dump(losses, f)
    if i == kill_after and jax.process_index() == 1:
        with open(f"{out}.killed", "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
