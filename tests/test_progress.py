"""A train step says what it compiles and how long it took, as px.compile does: once per new
input shape, in a log as two plain lines (no progress bar), and nothing with PADDLE_XLA_PROGRESS=0."""

import os
import subprocess
import sys

SCRIPT = """
import numpy as np
import paddle
import paddle_xla as px
from paddle.static import InputSpec

net = paddle.nn.Linear(4, 3)
opt = paddle.optimizer.SGD(0.1, parameters=net.parameters())
step = px.train_step(net, paddle.nn.functional.mse_loss, opt, [InputSpec([None, 4], "float32", "x")],
                     [InputSpec([None, 3], "float32", "y")])
for batch in (2, 2, 5):
    step(np.ones((batch, 4), np.float32), np.ones((batch, 3), np.float32))
"""


def _stderr(tmp_path, **env):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PADDLE_XLA_CACHE": "0", "PADDLE_XLA_PROGRESS_DELAY": "0", **env}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [line for line in proc.stderr.splitlines() if line.startswith("paddle_xla:")]


def test_train_step_compiles_are_announced_once_per_shape(tmp_path):
    lines = _stderr(tmp_path)
    assert [line.split(" in ")[0] if "compiled" in line else line for line in lines] == [
        "paddle_xla: compiling Linear train step for {'x': [2, 4], 'y': [2, 3]} ...",
        "paddle_xla: compiled Linear train step for {'x': [2, 4], 'y': [2, 3]}",
        "paddle_xla: compiling Linear train step for {'x': [5, 4], 'y': [5, 3]} ...",
        "paddle_xla: compiled Linear train step for {'x': [5, 4], 'y': [5, 3]}",
    ]
    assert all(line.endswith(" s") for line in lines[1::2])


def test_progress_off(tmp_path):
    assert _stderr(tmp_path, PADDLE_XLA_PROGRESS="0") == []
