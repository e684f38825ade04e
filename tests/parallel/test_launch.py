"""Two processes x 8 virtual CPU devices, joined by jax.distributed on loopback, train as one."""

import json
import subprocess
import sys

import numpy as np
import pytest

import paddle_xla as px
from parallel.helpers import assert_weights_close, train


@pytest.mark.parametrize("layout,groups", [("pipeline", 16), ("tensor", 2), ("annotated", 2)])
def test_two_processes_match_one(tmp_path, layout, groups):
    out = tmp_path / "curve.json"
    script = __file__.replace("test_launch.py", "launch_script.py")
    cmd = [
        sys.executable,
        "-m",
        "paddle_xla.cli",
        "launch",
        "--nproc",
        "2",
        "--cpu-devices",
        "8",
        script,
        str(out),
        layout,
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(out.read_text())
    # NOTE: the same groups (replicas x micro-batches) on one device of this process.
    losses, weights, _ = train("mlp", px.Strategy(micro_batches=groups), steps=4)
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-5)
    assert_weights_close({k: np.asarray(v, np.float32) for k, v in got["weights"].items()}, weights)
