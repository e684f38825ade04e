"""Run by test_launch in each of 2 processes (8 virtual CPU devices each): an unchanged training
script; process 0 writes the loss curve to argv[1]. argv[2] picks the layout: "pipeline" (4 replicas x
4 stages) or "tensor" (2 replicas, one per process, x 8 tensor devices within each)."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax

import paddle_xla as px
from parallel.helpers import train

assert jax.process_count() == 2 and jax.device_count() == 16, (jax.process_count(), jax.device_count())
LAYOUTS = {
    "pipeline": px.Strategy(replicas=4, stages=4, micro_batches=4),
    "tensor": px.Strategy(replicas=2, tensor=8),
    "annotated": px.Strategy(replicas=2, tensor=8),
}
layout = sys.argv[2] if len(sys.argv) > 2 else "pipeline"
if layout == "annotated":
    # NOTE: as a paddle.distributed script splits its model: over a mesh of both ranks (one per process),
    # each process holding only its rank's slice of l1 (columns) and l2 (rows); capture joins them.
    import paddle.distributed as dist

    from parallel.helpers import annotated_mlp

    mesh = dist.ProcessMesh([0, 1], dim_names=["mp"])
    losses, weights, step = train("mlp", LAYOUTS[layout], steps=4, build=lambda: annotated_mlp(mesh))
    assert step._step.engine.tensor_plan.how == "annotations"
else:
    losses, weights, _ = train("mlp", LAYOUTS[layout], steps=4)
if jax.process_index() == 0:
    with open(sys.argv[1], "w") as f:
        json.dump({"losses": losses, "weights": {k: v.tolist() for k, v in weights.items()}}, f)
