"""Importing paddle_xla hides Paddle's and JAX's start-up noise, never the user's own warnings, and
PADDLE_XLA_VERBOSE=1 brings the noise back."""

import os
import shutil
import subprocess
import sys

import pytest

SCRIPT = """
import paddle_xla as px
import warnings
import numpy as np
import paddle
from paddle.static import InputSpec

warnings.warn("the user's own warning")
net = paddle.nn.Linear(4, 3)
print(px.compile(net, [InputSpec([None, 4], "float32", "x")])(np.ones((2, 4), np.float32)).shape)
"""


def _run(tmp_path, **env):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PADDLE_XLA_VERBOSE", "GLOG_minloglevel")} | env
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "(2, 3)" in proc.stdout
    return proc.stderr


@pytest.mark.skipif(shutil.which("ccache") is not None, reason="Paddle warns about ccache only where it is missing")
def test_import_hides_the_start_up_noise_and_keeps_the_users_warnings(tmp_path):
    quiet = _run(tmp_path)
    assert "the user's own warning" in quiet
    assert "No ccache found" not in quiet and "Unable to initialize backend" not in quiet
    loud = _run(tmp_path, PADDLE_XLA_VERBOSE="1")
    assert "the user's own warning" in loud and "No ccache found" in loud


def test_cli_verbose_takes_the_filters_back():
    import warnings

    from paddle_xla import quiet

    quiet.quiet_start_up_noise()
    assert quiet._ADDED and all(f in warnings.filters for f in quiet._ADDED)
    added = list(quiet._ADDED)
    try:
        quiet.show_everything()
        assert not any(f in warnings.filters for f in added)
    finally:
        os.environ.pop("PADDLE_XLA_VERBOSE", None)
